#!/usr/bin/env bash
# Compares two builds of lockgate, A (a baseline checkout) and B (this
# checkout), on W1 throughput and W2 latency, alternately, round after
# round, one process per run, and prints the medians and the B/A ratios.
# Use it to show that a change costs the record path nothing (or what it
# costs). Measure on a quiet machine: nothing else building or running.
#
# usage: perf-scripts/ab-compare.sh -a BASE_DIR [-n ROUNDS] [-r W1_RECORDS] [-d W2_SECONDS] [-w WORKERS]
#   BASE_DIR: another checkout (e.g. `git worktree add /tmp/base <rev>`),
#   built here with its own target folder when its binaries are missing.
#   -w: W2 also on WORKERS cooperative worker threads (--workers; both
#   builds must have the flag, i.e. 8f46982 or later).
set -euo pipefail

rounds=5
records=20000000
duration=5
base=""
workers=""
usage() {
  echo "usage: $0 -a BASE_DIR [-n ROUNDS (default 5)] [-r W1_RECORDS (default 20000000)] [-d W2_SECONDS (default 5)] [-w WORKERS (W2 on cooperative workers too)]"
  echo "Alternates W1 (none, exactly-once 100 ms) and W2 (none, exactly-once 100 ms) on the"
  echo "builds of BASE_DIR (A) and of this checkout (B); prints medians and B/A ratios."
}
while getopts "a:n:r:d:w:h" opt; do
  case $opt in
    a) base=$OPTARG ;;
    n) rounds=$OPTARG ;;
    r) records=$OPTARG ;;
    d) duration=$OPTARG ;;
    w) workers=$OPTARG ;;
    h) usage; exit 0 ;;
    *) usage; exit 2 ;;
  esac
done
[[ -n "$base" ]] || { usage >&2; exit 2; }
[[ -d "$base" ]] || { echo "error: -a $base is not a folder (a checkout of the baseline, e.g. git worktree add /tmp/base <rev>)" >&2; exit 2; }
for v in "rounds:$rounds" "records:$records" "duration:$duration" ${workers:+"workers:$workers"}; do
  [[ ${v#*:} =~ ^[1-9][0-9]*$ ]] || { echo "error: ${v%%:*} must be a positive whole number, got '${v#*:}'" >&2; usage >&2; exit 2; }
done
command -v python3 >/dev/null || { echo "python3 is needed (Debian: apt-get install python3)" >&2; exit 3; }
here="$(cd "$(dirname "$0")/.." && pwd)"
base="$(cd "$base" && pwd)"
for dir in "$base" "$here"; do
  if [[ ! -x "$dir/target/release/lockgate" ]]; then
    echo "building $dir (cargo build --release -p lockgate-cli)..." >&2
    (cd "$dir" && cargo build --release -q -p lockgate-cli >&2)
  fi
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
run() { # side dir
  local side=$1 dir=$2
  for mode in none exactly-once; do
    local every=()
    [[ $mode == none ]] || every=(--checkpoint-interval-ms 100)
    # W1 through loadgen, whose flags and default checkpoint folder (on
    # disk) are the same in every version; the `w1` bench binary kept
    # checkpoints in memory before 4bd3176, so two builds' `w1` would not
    # compare the same checkpoints.
    "$dir/target/release/lockgate" loadgen --workload w1 --records "$records" \
      --checkpoint "$mode" "${every[@]}" --quiet --json "$out/w1.json" >/dev/null
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(sys.argv[2], "w1", sys.argv[3], json.dumps({"records_per_s": r["records_per_s"]}))' \
      "$out/w1.json" "$side" "$mode" >>"$out/w1"
    local threads=("")
    [[ -z "$workers" ]] || threads+=("$workers")
    for w in "${threads[@]}"; do
      "$dir/target/release/lockgate" loadgen --workload w2 --duration "$duration" --warmup 1 \
        --checkpoint "$mode" "${every[@]}" ${w:+--workers "$w"} --quiet --json "$out/r.json" >/dev/null
      python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); l=r["latency_ns"]; d=r["checkpoints"]["duration_ns"] or {}; print(sys.argv[2], "w2", sys.argv[3], l["p50"], l["p99"], d.get("p50", 0))' \
        "$out/r.json" "$side" "$mode${w:+-w$w}" >>"$out/w2"
    done
  done
}
for i in $(seq 1 "$rounds"); do
  # alternate which side goes first, so that neither always runs on a warmer machine
  if (( i % 2 )); then run A "$base"; run B "$here"; else run B "$here"; run A "$base"; fi
done
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); A $(git -C "$base" rev-parse --short HEAD), B $(git -C "$here" rev-parse --short HEAD); $(date -u +%F)"
echo "command: perf-scripts/ab-compare.sh -a $base -n $rounds -r $records -d $duration${workers:+ -w $workers}"
python3 - "$out" <<'PY'
import json, statistics, sys, os
d = sys.argv[1]
w1 = {}
for line in open(os.path.join(d, "w1")):
    side, _, mode, js = line.split(" ", 3)
    w1.setdefault((side, mode), []).append(json.loads(js)["records_per_s"] / 1e6)
w2 = {}
for line in open(os.path.join(d, "w2")):
    side, _, mode, p50, p99, e2e = line.split()
    w2.setdefault((side, mode), []).append((int(p50) / 1e3, int(p99) / 1e3, float(e2e) / 1e6))
print(f"{'W1 (M records/s)':<26}{'A median':>10}{'B median':>10}{'B/A':>7}   A min-max / B min-max")
for mode in ["none", "exactly-once"]:
    a, b = w1[("A", mode)], w1[("B", mode)]
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"{mode:<26}{ma:>10.2f}{mb:>10.2f}{mb/ma:>7.3f}   {min(a):.2f}-{max(a):.2f} / {min(b):.2f}-{max(b):.2f}")
print(f"{'W2 200k/s (us; e2e ms)':<26}{'A p50':>8}{'B p50':>8}{'A p99':>8}{'B p99':>8}{'p99 B/A':>9}{'A e2e':>8}{'B e2e':>8}")
for mode in sorted({m for _, m in w2}, key=lambda m: (m.split("-w")[1:], m)):
    a, b = w2[("A", mode)], w2[("B", mode)]
    a50, b50 = statistics.median(x[0] for x in a), statistics.median(x[0] for x in b)
    a99, b99 = statistics.median(x[1] for x in a), statistics.median(x[1] for x in b)
    ae, be = statistics.median(x[2] for x in a), statistics.median(x[2] for x in b)
    print(f"{mode:<26}{a50:>8.0f}{b50:>8.0f}{a99:>8.0f}{b99:>8.0f}{b99/a99:>9.2f}{ae:>8.1f}{be:>8.1f}")
print("W2 modes ending in -wN ran on N cooperative workers; e2e: checkpoint end-to-end p50")
PY
