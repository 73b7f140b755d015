#!/usr/bin/env bash
# Runs W1 (docs/workloads.md) on the raw crossbeam baseline and on lockgate
# (no checkpoints, exactly-once and at-least-once every 100 ms, into a
# temporary folder on disk as loadgen's default: `w1 --storage disk`), alternately,
# N times, one process per run (so each peak RSS is its own), and prints the
# median records/s with its spread, the ratios, and the peak memory.
#
# With -w W, each round also runs lockgate on W cooperative worker threads
# (--workers W: none and exactly-once).
#
# usage: perf-scripts/w1-compare.sh [-n RUNS] [-r RECORDS] [-w WORKERS]
set -euo pipefail

runs=5
records=20000000
workers=""
usage() {
  echo "usage: $0 [-n RUNS (default 5)] [-r RECORDS (default 20000000)] [-w WORKERS (default: no worker-pool rows)]"
  echo "Runs W1 raw vs lockgate alternately and prints medians, spreads and ratios."
}
while getopts "n:r:w:h" opt; do
  case $opt in
    n) runs=$OPTARG ;;
    r) records=$OPTARG ;;
    w) workers=$OPTARG ;;
    h) usage; exit 0 ;;
    *) usage; exit 2 ;;
  esac
done
command -v python3 >/dev/null || { echo "python3 is needed (Debian: apt-get install python3)" >&2; exit 3; }
cd "$(dirname "$0")/.."
source perf-scripts/common.sh
# LOCKGATE_PREBUILT=1 (common.sh): no cargo, the binary must be there.
prebuilt || cargo build --release -q -p lockgate-benches --bin w1
bin=target/release/w1
[[ -x "$bin" ]] || { echo "no binary at $bin" >&2; exit 3; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for _ in $(seq 1 "$runs"); do
  "$bin" --pipeline raw --records "$records" >>"$out"
  for mode in none exactly-once at-least-once; do
    "$bin" --pipeline lockgate --records "$records" --checkpoint "$mode" --interval-ms 100 >>"$out"
  done
  if [[ -n "$workers" ]]; then
    for mode in none exactly-once; do
      "$bin" --pipeline lockgate --records "$records" --checkpoint "$mode" --interval-ms 100 --workers "$workers" >>"$out"
    done
  fi
done
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown); $(date -u +%F)"
echo "command: perf-scripts/w1-compare.sh -n $runs -r $records${workers:+ -w $workers}"
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def runtime(r):
    w = r.get("workers")
    return "lockgate" if w is None else f"lockgate {w} workers"
def key(r): return r["pipeline"] if r["pipeline"] == "raw" else runtime(r) + " " + r["checkpoint"]
groups = {}
for r in rows:
    groups.setdefault(key(r), []).append(r)
med = {k: statistics.median(x["records_per_s"] for x in v) for k, v in groups.items()}
print(f"{'pipeline':<34}{'median M rec/s':>15}{'min-max':>16}{'ratio':>8}{'peak RSS MiB':>14}{'exact':>7}")
pools = sorted({runtime(r) for r in rows if r.get("workers") is not None})
order = ["raw"] + [f"{rt} {m}" for rt in ["lockgate"] + pools for m in ["none", "exactly-once", "at-least-once"]]
for k in order:
    v = groups.get(k)
    if not v: continue
    rps = [x["records_per_s"] / 1e6 for x in v]
    rt, mode = k.rsplit(" ", 1) if k != "raw" else ("raw", "none")
    base = med["raw"] if mode == "none" else med.get(rt + " none", med["raw"])
    ratio = med[k] / base if k != "raw" else 1.0
    rss = statistics.median(x["peak_rss_bytes"] for x in v) / 2**20
    print(f"{k:<34}{med[k]/1e6:>15.2f}{min(rps):>8.2f}-{max(rps):<7.2f}{ratio:>8.3f}{rss:>14.1f}{str(all(x['exact'] for x in v)):>7}")
print("ratio: none / raw; checkpointed modes / the same runtime's none")
PY
