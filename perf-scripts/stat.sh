#!/usr/bin/env bash
# perf stat of one lockgate run, for the whole process and per thread.
set -euo pipefail

usage() {
    cat <<'USAGE'
usage: perf-scripts/stat.sh [-h] [-e EVENTS] -- <lockgate args>

Runs `lockgate <args>` (target/release/lockgate, built if missing) under
`perf stat` and prints:
  1. the counters of the whole process (threads included);
  2. the same counters per thread, summed by thread name (the engine names
     task threads lg<node>-<name>-<subtask>, the job thread lg-job), from a
     second `perf stat --per-thread -p PID` attached once the task threads
     exist (the first few ms of the run are not in this table).

Counters: hardware ones (cycles, instructions, branches, branch-misses,
cache-misses) where the machine counts them; on a VM without a PMU
(`perf stat -e instructions true` says <not supported>) the software ones:
task-clock, context-switches, cpu-migrations, page-faults. -e overrides.

Example:
  perf-scripts/stat.sh -- loadgen --workload w1 --records 2000000 --checkpoint none --quiet
USAGE
}

source "$(dirname "$0")/common.sh"

events=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        -e) [[ $# -ge 2 ]] || die "-e needs a list of events"; events="$2"; shift 2 ;;
        --) shift; break ;;
        *) usage >&2; die "unexpected argument '$1' (lockgate's arguments go after --)" ;;
    esac
done
[[ $# -gt 0 ]] || { usage >&2; die "no lockgate arguments after --"; }

need_tool perf "apt-get install linux-perf (Debian) or linux-tools-\$(uname -r) (Ubuntu)"
ensure_lockgate

SOFT="task-clock,context-switches,cpu-migrations,page-faults"
HARD="cycles,instructions,branches,branch-misses,cache-misses"
if [[ -z "$events" ]]; then
    if perf stat -x, -e instructions true 2>&1 | grep -q '<not supported>\|<not counted>'; then
        echo "# no hardware counters here (a VM?): software events only"
        events="$SOFT"
    else
        events="$SOFT,$HARD"
    fi
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# The whole process, every thread inherited, from exec to exit.
perf stat -e "$events" -o "$tmp/total.txt" -- "$LOCKGATE_BIN" "$@" &
perf_pid=$!

# The lockgate process is perf's child; wait until it has task threads.
lg_pid=""
for _ in $(seq 1 2000); do
    lg_pid="$(pgrep -P "$perf_pid" 2>/dev/null | head -n1 || true)"
    if [[ -n "$lg_pid" ]] && grep -qs '^lg' /proc/"$lg_pid"/task/*/comm; then
        break
    fi
    kill -0 "$perf_pid" 2>/dev/null || break
    sleep 0.005
done

if [[ -n "$lg_pid" ]] && kill -0 "$lg_pid" 2>/dev/null; then
    # Counts every thread that exists now until the process exits.
    perf stat --per-thread -x, -e "$events" -p "$lg_pid" -o "$tmp/threads.csv" \
        -- tail --pid="$lg_pid" -f /dev/null 2>/dev/null || true
fi
rc=0
wait "$perf_pid" || rc=$?

echo "== perf stat, whole process (lockgate $*)"
grep -v '^#' "$tmp/total.txt" | sed '/^$/N;/^\n$/D'
if [[ -s "$tmp/threads.csv" ]]; then
    echo "== per thread, summed by thread name (attached after start-up)"
    python3 - "$tmp/threads.csv" <<'PY'
import collections, re, sys
# --per-thread -x, lines: comm-tid,value,unit,event,...
rows = collections.defaultdict(dict)
events = []
for line in open(sys.argv[1]):
    if not line.strip() or line.startswith("#"):
        continue
    f = line.rstrip("\n").split(",")
    if len(f) < 4:
        continue
    name = re.sub(r"-\d+$", "", f[0].strip())
    ev = f[3]
    if ev not in events:
        events.append(ev)
    try:
        v = float(f[1])
    except ValueError:
        continue
    rows[name][ev] = rows[name].get(ev, 0.0) + v
if not rows:
    print("(no per-thread counts)")
    sys.exit(0)
key = events[0]
w = max(len(n) for n in rows) + 2
print("thread".ljust(w) + "".join(e.rjust(18) for e in events))
for name, r in sorted(rows.items(), key=lambda kv: -kv[1].get(key, 0.0)):
    print(name.ljust(w) + "".join(f"{r.get(e, 0.0):18,.1f}" for e in events))
PY
else
    echo "== per thread: the process ended before perf could attach (run longer for a per-thread table)"
fi
exit "$rc"
