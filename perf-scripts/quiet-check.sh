#!/usr/bin/env bash
# Is this machine quiet enough to benchmark on? Run it before (and after)
# a measurement and publish its output beside the figures.
#
# Prints the load average, then runs a probe twice: one process, then one
# process per core (what a job that keeps every core busy meets, as W2 at
# 200,000 records/s does on 2 cores). Each probe process reads the
# monotonic clock in a loop for SECONDS and notes every gap between two
# reads over 0.5 ms: time in which it had no core (the kernel ran
# something else, or the hypervisor took the vCPU away: steal). It also
# prints the steal time the kernel counted meanwhile (/proc/stat).
#
# How to read it: with every core busy, a gap of G ms means a record can
# wait G ms for reasons that are not the engine's, so a p99 latency
# measured in a run that keeps every core busy is noise below the gaps'
# share of the time: on the 2-core VM of 2026-12-06, one process saw no
# gap over 1.75 ms, two saw gaps up to 8.9-28.9 ms (docs/benchmarks-history.md, "What
# this VM can resolve today"). A loop iteration of the probe costs ~0.1
# µs of Python, far below the 0.5 ms threshold.
#
# usage: perf-scripts/quiet-check.sh [-s SECONDS (default 5)]
set -euo pipefail

seconds=5
usage() {
  echo "usage: $0 [-s SECONDS (default 5)]"
  # The comment block at the top of this file: what it does, how to read it.
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
}
while getopts "s:h" opt; do
  case $opt in
    s) seconds=$OPTARG ;;
    h) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
done
[[ "$seconds" =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "error: -s needs a number of seconds, got '$seconds'" >&2; exit 2; }
command -v python3 >/dev/null || { echo "error: python3 is needed (Debian: apt-get install python3)" >&2; exit 3; }

python3 - "$seconds" <<'PY'
import multiprocessing as mp, os, sys, time

SECONDS = float(sys.argv[1])
THRESHOLD = 0.0005  # s: a gap longer than this is time without a core

def probe(seconds, out):
    gaps = []
    last = time.perf_counter()
    end = last + seconds
    while True:
        now = time.perf_counter()
        if now - last > THRESHOLD:
            gaps.append(now - last)
        last = now
        if now > end:
            break
    out.put(gaps)

def steal_ticks():
    # /proc/stat "cpu" line: user nice system idle iowait irq softirq steal ...
    with open("/proc/stat") as f:
        fields = f.readline().split()
    return int(fields[8]) if len(fields) > 8 else 0

def run(procs):
    q = mp.Queue()
    ps = [mp.Process(target=probe, args=(SECONDS, q)) for _ in range(procs)]
    s0 = steal_ticks()
    for p in ps:
        p.start()
    results = [q.get() for _ in ps]
    for p in ps:
        p.join()
    steal_ms = (steal_ticks() - s0) * 1000 / os.sysconf("SC_CLK_TCK")
    print(f"{procs} busy process(es), {SECONDS:g} s, steal {steal_ms:.0f} ms:")
    worst = 0.0
    for i, gaps in enumerate(results):
        big = sum(1 for g in gaps if g > 0.002)
        mx = max(gaps, default=0.0)
        worst = max(worst, mx)
        off = sum(gaps)
        longest = f"longest {mx * 1e3:.2f} ms" if gaps else "no gap to measure"
        print(f"  process {i}: {len(gaps)} gaps over 0.5 ms, {big} over 2 ms, "
              f"{longest}, {off / SECONDS * 100:.2f} % of the time without a core")
    return worst

cores = os.cpu_count() or 1
print(f"cores {cores}, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
one = run(1)
allc = run(cores)
print(f"longest gap: {one * 1e3:.2f} ms with one core busy, {allc * 1e3:.2f} ms with all {cores} busy")
print(f"a run that keeps every core busy can see records wait {allc * 1e3:.1f} ms for reasons "
      "not its own: compare only figures well above that, or tails of runs that leave a core idle")
PY
