#!/usr/bin/env bash
# Off-CPU view of a loadgen run: records it with `perf sched record` and
# prints, per thread, its CPU time, its context switches, and how often and
# how long it waited for a CPU after being woken (scheduling delay), from
# `perf sched timehist`. Task threads are lg<stage>-<name>-<subtask>,
# snapshot threads lg-snap-<task>, the publisher lg-publish, the job thread
# (checkpoint coordinator) lg-job. Use it to see whether records wait for a
# CPU during checkpoints (task threads' delays) or for something else.
# A second table takes the time in which at least one task thread
# (lg-worker-* with --workers, else lg<stage>-*) was off its core in a gap
# longer than the threshold (overlapping gaps merged, so each moment
# counts once), and sums per other thread how long it ran in that time:
# who held the cores while records waited (e.g. snapshot threads holding
# a core until the scheduler's tick after a task's yield); idle cores
# (<idle>) and perf itself are shown apart.
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
[[ $threshold =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "error: -t: '$threshold' is not a number of ms" >&2; exit 2; }
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

echo
echo "time task threads were off their cores in gaps over $threshold ms, and who ran then"
python3 - "$tmp/timehist.txt" "$threshold" <<'PY'
import bisect, collections, re, sys
limit = float(sys.argv[2]) / 1000
runs = []  # (start s, end s, name)
for line in open(sys.argv[1]):
    p = line.split()
    try:
        end, run = float(p[0]), float(p[-1]) / 1000
    except (ValueError, IndexError):
        continue
    if len(p) >= 6:
        runs.append((end - run, end, re.sub(r"\[.*", "", p[2])))
runs.sort()
def is_task(n):
    return n.startswith("lg-worker") or (n.startswith("lg") and not n.startswith(("lg-snap", "lg-publish", "lg-job")))
last, gaps = {}, []
for s, e, n in runs:
    if is_task(n):
        if n in last and s - last[n] > limit:
            gaps.append((last[n], s))
        last[n] = e
# Overlapping gaps of several task threads merged: each moment once.
merged = []
for gs, ge in sorted(gaps):
    if merged and gs <= merged[-1][1]:
        merged[-1][1] = max(merged[-1][1], ge)
    else:
        merged.append([gs, ge])
starts = [r[0] for r in runs]
during = collections.Counter()
for gs, ge in merged:
    lo = bisect.bisect_left(starts, gs - 0.05)
    for s, e, n in runs[lo:bisect.bisect_right(starts, ge)]:
        overlap = min(e, ge) - max(s, gs)
        if overlap > 0 and not is_task(n):
            during[n] += overlap
print(f"{len(gaps)} gaps of task threads, {sum(ge - gs for gs, ge in merged) * 1000:.1f} ms of time in them")
print(f"{'thread':<20}{'ran in that time, ms':>22}")
for n, t in during.most_common(14):
    if n not in ("<idle>", "perf"):
        print(f"{n:<20}{t * 1000:>22.1f}")
print(f"{'(cores idle)':<20}{during['<idle>'] * 1000:>22.1f}")
print(f"{'(perf itself)':<20}{during['perf'] * 1000:>22.1f}")
PY
