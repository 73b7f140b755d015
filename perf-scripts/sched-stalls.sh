#!/usr/bin/env bash
# Off-CPU view of a loadgen run: records it with `perf sched record` and
# prints, per thread, its CPU time, its context switches, and how often and
# how long it waited for a CPU after being woken (scheduling delay), from
# `perf sched timehist`. Task threads are lg<stage>-<name>-<subtask>,
# snapshot threads lg-snap-<task>, the publisher lg-publish, the job thread
# (checkpoint coordinator) lg-job. Use it to see whether records wait for a
# CPU during checkpoints (task threads' delays) or for something else.
#
# usage: perf-scripts/sched-stalls.sh [-t DELAY_MS (default 0.3)] [-- LOADGEN_ARGS...]
#   LOADGEN_ARGS default: --duration 3 --warmup 1 (W2, exactly-once).
#   LOCKGATE_BIN selects the binary (default target/release/lockgate).
#   Needs perf (Debian: apt-get install linux-perf) and permission to trace
#   scheduler events (root, or kernel.perf_event_paranoid <= 1).
set -euo pipefail

threshold=0.3
usage() { echo "usage: $0 [-t DELAY_MS] [-- LOADGEN_ARGS...]"; }
while getopts "t:h" opt; do
  case $opt in
    t) threshold=$OPTARG ;;
    h) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[[ ${1:-} == "--" ]] && shift
args=("$@")
[[ ${#args[@]} -gt 0 ]] || args=(--duration 3 --warmup 1)
here="$(cd "$(dirname "$0")/.." && pwd)"
bin=${LOCKGATE_BIN:-$here/target/release/lockgate}
[[ -x "$bin" ]] || { echo "no binary at $bin (cargo build --release -p lockgate-cli)" >&2; exit 3; }
command -v perf >/dev/null || { echo "perf is needed (Debian: apt-get install linux-perf)" >&2; exit 3; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
perf sched record -o "$tmp/sched.data" -- "$bin" loadgen "${args[@]}" --progress never \
  >"$tmp/run.txt" 2>"$tmp/perf.txt" || { cat "$tmp/perf.txt" >&2; exit 1; }
grep -E "^ +p50|end-to-end|sync part|result" "$tmp/run.txt" || true
perf sched timehist -i "$tmp/sched.data" 2>/dev/null >"$tmp/timehist.txt"
awk -v t="$threshold" '
  # columns: time cpu task wait_ms sch_delay_ms run_ms
  $3 ~ /^lg/ {
    name = $3; sub(/\[.*/, "", name)
    run[name] += $6; n[name]++
    if ($5 + 0 > t) { late[name]++ }
    if ($5 + 0 > max[name]) { max[name] = $5 + 0 }
  }
  END {
    printf "%-18s %10s %9s %14s %12s\n", "thread", "cpu ms", "switches", "delays > " t " ms", "max delay ms"
    for (k in run) printf "%-18s %10.1f %9d %14d %12.3f\n", k, run[k], n[k], late[k], max[k]
  }' "$tmp/timehist.txt" | sort
