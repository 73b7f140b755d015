#!/usr/bin/env bash
# A job that checkpoints for a long time at a constant cost: W2 with
# frequent checkpoints, a line per minute, and the last minute against the
# second (issue 37: checkpoints/s and end-to-end p50 within +-20 %,
# resident memory within +10 MB).
set -euo pipefail

usage() {
    cat <<'USAGE'
usage: perf-scripts/soak.sh [-h] [-m MINUTES] [-r RATE] [-c CONFIGS]

Runs `lockgate loadgen --workload w2 --keys 10000 --rate RATE` for MINUTES
minutes (default 10) in each configuration, with `--interval-report 60`,
one after another:
  mem-threads   checkpoints every 1 ms in memory, a thread per task
  mem-workers   the same on 2 cooperative workers (--workers 2)
  disk-threads  checkpoints every 10 ms to a temporary folder on disk
  disk-workers  the same with --workers 2
CONFIGS picks some, comma-separated (default: all four). RATE defaults to
20000 records/s. Each minute prints the checkpoints completed per second,
their end-to-end p50 and p99 in that minute, and the resident memory;
each configuration ends with the last minute against the second (the
first is warm-up) and `ok` when checkpoints/s and the end-to-end p50 are
within +-20 % and the memory within +10 MB, else `DRIFT`.
Nothing else should run beside it (helpers, builds): it measures rates.
USAGE
}

source "$(dirname "$0")/common.sh"

minutes=10
rate=20000
configs="mem-threads,mem-workers,disk-threads,disk-workers"
while getopts "hm:r:c:" opt; do
    case "$opt" in
        h) usage; exit 0 ;;
        m) minutes="$OPTARG" ;;
        r) rate="$OPTARG" ;;
        c) configs="$OPTARG" ;;
        *) usage >&2; exit 2 ;;
    esac
done
[[ "$minutes" =~ ^[1-9][0-9]*$ ]] || die "-m: '$minutes' is not a whole number of minutes above 0"
((minutes >= 3)) || die "-m: at least 3 minutes (the second is compared with the last)"
[[ "$rate" =~ ^[1-9][0-9]*$ ]] || die "-r: '$rate' is not a rate above 0"
ensure_lockgate

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

IFS=',' read -r -a chosen <<<"$configs"
for c in "${chosen[@]}"; do
    case "$c" in
        mem-threads) args=(--checkpoint-interval-ms 1 --checkpoint-storage memory) ;;
        mem-workers) args=(--checkpoint-interval-ms 1 --checkpoint-storage memory --workers 2) ;;
        disk-threads) args=(--checkpoint-interval-ms 10) ;;
        disk-workers) args=(--checkpoint-interval-ms 10 --workers 2) ;;
        *) die "-c: unknown configuration '$c' (mem-threads, mem-workers, disk-threads, disk-workers)" ;;
    esac
    echo "== $c: W2, $rate records/s, $minutes min: ${args[*]}"
    "$LOCKGATE_BIN" loadgen --workload w2 --keys 10000 --rate "$rate" \
        --duration "$((minutes * 60))" --warmup 0 --interval-report 60 --quiet \
        "${args[@]}" 2>"$tmp/$c.err" | tail -1
    grep '^interval at' "$tmp/$c.err" || die "$c: no interval lines ($(tail -3 "$tmp/$c.err"))"
    python3 - "$tmp/$c.err" <<'PY'
import re, sys
rows = []
for line in open(sys.argv[1]):
    m = re.match(r"interval at (\d+) s: .*?([\d.]+) checkpoints/s .*end-to-end p50 ([\d.]+) (ns|µs|ms|s) p99 ([\d.]+) (ns|µs|ms|s), RSS ([\d.]+) MiB", line)
    if m:
        unit = {"ns": 1e-6, "µs": 1e-3, "ms": 1.0, "s": 1e3}
        rows.append((float(m[2]), float(m[3]) * unit[m[4]], float(m[7])))
if len(rows) < 3:
    sys.exit(f"only {len(rows)} minutes reported")
(c2, p2, r2), (cl, pl, rl) = rows[1], rows[-1]
ok = abs(cl / c2 - 1) <= 0.2 and abs(pl / p2 - 1) <= 0.2 and rl - r2 <= 10
print(f"   minute 2 -> minute {len(rows)}: checkpoints/s {c2:.1f} -> {cl:.1f} ({cl / c2:.2f}x), "
      f"end-to-end p50 {p2:.3f} -> {pl:.3f} ms ({pl / p2:.2f}x), RSS {r2:.1f} -> {rl:.1f} MiB "
      f"({rl - r2:+.1f}): {'ok' if ok else 'DRIFT'}")
PY
done
