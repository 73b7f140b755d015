#!/usr/bin/env bash
# What checkpoints cost the record path: runs W2 (200k records/s) without
# checkpoints, exactly-once and at-least-once every 100 ms, the same with
# 1,000,000 keys, and W1 with and without exactly-once checkpoints, on one
# or more lockgate binaries, alternated round after round (one process a
# run), and prints per binary and configuration the medians over rounds of
# p50/p99 latency (W2) or throughput (W1), the checkpoints' end-to-end
# duration, their synchronous and asynchronous parts, and the bytes written
# per checkpoint against the full state (issue 10's table); and W4
# (sustained backpressure: a sink of 5 us a record) with exactly-once and
# at-least-once checkpoints, whose end-to-end duration is what aligned
# barriers cost behind full channels (issue 11's baseline; W4's sink spins
# a core, and its p50/p99 are not a latency test).
# Measure on a quiet machine: nothing else building or running.
#
# usage: perf-scripts/checkpoint-cost.sh [-n ROUNDS] [-d W2_W4_SECONDS] [-r W1_RECORDS] BINARY...
#   BINARY: a lockgate binary, e.g. target/release/lockgate and the one of
#   another checkout (git worktree add /tmp/base <rev>; build it there).
#   Checkpoints go to a temporary folder on disk (as loadgen's default).
set -euo pipefail

rounds=3
duration=6
records=5000000
usage() {
  echo "usage: $0 [-n ROUNDS (default 3)] [-d W2_SECONDS (default 6)] [-r W1_RECORDS (default 5000000)] BINARY..."
}
while getopts "n:d:r:h" opt; do
  case $opt in
    n) rounds=$OPTARG ;;
    d) duration=$OPTARG ;;
    r) records=$OPTARG ;;
    h) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[[ $# -ge 1 ]] || { usage >&2; exit 2; }
for b in "$@"; do
  [[ -x "$b" ]] || { echo "not an executable: $b" >&2; exit 2; }
done
command -v python3 >/dev/null || { echo "python3 is needed (Debian: apt-get install python3)" >&2; exit 3; }
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

configs=(
  "w2-none|--workload w2 --checkpoint none"
  "w2-exactly-once|--workload w2 --checkpoint exactly-once"
  "w2-at-least-once|--workload w2 --checkpoint at-least-once"
  "w2-1M-none|--workload w2 --keys 1000000 --checkpoint none"
  "w2-1M-exactly-once|--workload w2 --keys 1000000 --checkpoint exactly-once"
  "w1-none|--workload w1 --checkpoint none"
  "w1-exactly-once|--workload w1 --checkpoint exactly-once"
  "w4-exactly-once|--workload w4 --checkpoint exactly-once"
  "w4-at-least-once|--workload w4 --checkpoint at-least-once"
)
for round in $(seq 1 "$rounds"); do
  for entry in "${configs[@]}"; do
    name=${entry%%|*}
    read -r -a args <<<"${entry#*|}"
    if [[ $name == w1-* ]]; then
      args+=(--records "$records")
    else
      args+=(--duration "$duration" --warmup 1)
    fi
    i=0
    for b in "$@"; do
      i=$((i + 1))
      json="$out/$name-b$i-r$round.json"
      echo "round $round: $name on binary $i" >&2
      "$b" loadgen "${args[@]}" --progress never --json "$json" >/dev/null 2>"$out/err" \
        || { echo "run failed: $b loadgen ${args[*]}" >&2; cat "$out/err" >&2; exit 1; }
    done
  done
done

python3 - "$out" "$rounds" "$@" <<'EOF'
import json, statistics, sys, os
out, rounds, bins = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
names = []
for f in sorted(os.listdir(out)):
    if f.endswith('.json'):
        n = f.rsplit('-b', 1)[0]
        if n not in names:
            names.append(n)
def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))] if v else 0
print("medians over %d rounds; times in us, sizes in bytes" % rounds)
print("%-20s %-4s %9s %9s %11s %10s %10s %10s %12s %12s" % (
    "config", "bin", "p50", "p99", "records/s", "e2e p50", "sync p50", "async p50",
    "written p50", "state last"))
for n in names:
    for i, b in enumerate(bins, 1):
        rows = []
        for r in range(1, rounds + 1):
            p = os.path.join(out, "%s-b%d-r%d.json" % (n, i, r))
            with open(p) as fh:
                j = json.load(fh)
            cp = j["checkpoints"]
            done = [c for c in cp["list"] if c["status"] == "completed"]
            subs = [t for c in done for t in c.get("subtasks", [])]
            # After the first checkpoint (the first is always full).
            later = done[1:] or done
            rows.append((
                j["latency_ns"]["p50"] / 1e3, j["latency_ns"]["p99"] / 1e3,
                j["records_per_s"],
                cp["duration_ns"]["p50"] / 1e3,
                pct([t["sync_ns"] for t in subs], 0.5) / 1e3,
                pct([t["async_ns"] for t in subs], 0.5) / 1e3,
                pct([c.get("checkpointed_bytes", 0) for c in later], 0.5),
                cp.get("state_bytes_last", 0),
            ))
        med = [statistics.median(col) for col in zip(*rows)]
        print("%-20s %-4s %9.1f %9.1f %11.0f %10.1f %10.1f %10.1f %12d %12d" % (
            n, "b%d" % i, med[0], med[1], med[2], med[3], med[4], med[5], med[6], med[7]))
EOF
