#!/usr/bin/env bash
# Committed-output latency on a machine lent for a few minutes (issue 35's
# 16-core goals: committed p99 <= 5 ms and an --ab p99 ratio <= 1.1 at a
# 2 ms interval). Under 4 minutes: for each checkpoint storage, disk (a
# folder under OUT_DIR) and tmpfs (/dev/shm), one 20 s W2 run with
# committed output and one 20 s --ab run (segments of 0.33 s, 20 a group),
# both exactly-once every 2 ms, a thread per task. Each run's report and
# JSON land in OUT_DIR as soon as it ends; a summary is printed last.
#
# Nothing is built when LOCKGATE_PREBUILT=1 (copy target/release/lockgate
# there first, see perf-scripts/suite.sh).
#
# usage: perf-scripts/committed-device.sh [-o OUT_DIR] [-i INTERVAL_MS] [-d SECONDS]
set -euo pipefail
source "$(dirname "$0")/common.sh"

out_dir=.
interval=2
secs=20
usage() {
    echo "usage: $0 [-o OUT_DIR (default .)] [-i INTERVAL_MS, 1-100 (default 2)] [-d SECONDS, 6-60 (default 20)]"
}
while getopts "o:i:d:h" opt; do
    case $opt in
        o) out_dir=$OPTARG ;;
        i) interval=$OPTARG ;;
        d) secs=$OPTARG ;;
        h) usage; exit 0 ;;
        *) usage >&2; exit 2 ;;
    esac
done
if ! [[ $interval =~ ^[0-9]+$ ]] || ((interval < 1 || interval > 100)); then
    usage >&2
    die "-i must be 1-100, got '$interval'"
fi
if ! [[ $secs =~ ^[0-9]+$ ]] || ((secs < 6 || secs > 60)); then
    usage >&2
    die "-d must be 6-60, got '$secs'"
fi
mkdir -p "$out_dir" || die "cannot create $out_dir"
ensure_lockgate

# 66 segments in the run: 20 a group and a margin.
segment=$(awk -v d="$secs" 'BEGIN { printf "%.3f", d / 66 }')
common=(loadgen --workload w2 --duration "$secs" --warmup 1 --checkpoint exactly-once
        --checkpoint-interval-ms "$interval" --output committed --progress never)

run() { # NAME CHECKPOINT_DIR EXTRA...
    local name=$1 dir=$2
    shift 2
    rm -rf "$dir"
    echo "== $name" >&2
    timeout $((secs * 2 + 30)) "$LOCKGATE_BIN" "${common[@]}" --checkpoint-dir "$dir" \
        --json "$out_dir/$name.json" "$@" >"$out_dir/$name.txt" 2>&1 \
        || echo "   $name: exit $? (see $out_dir/$name.txt)" >&2
    rm -rf "$dir"
}

shm=/dev/shm/lockgate-committed-$$
[[ -d /dev/shm ]] || shm=$out_dir/no-shm-chk
for storage in disk tmpfs; do
    if [[ $storage == disk ]]; then dir=$out_dir/chk-disk; else dir=$shm; fi
    run "$storage-committed" "$dir"
    run "$storage-ab" "$dir" --ab "$segment"
done

echo "== summary (interval $interval ms, $secs s a run)"
for f in "$out_dir"/*-committed.txt "$out_dir"/*-ab.txt; do
    [[ -f $f ]] || continue
    echo "-- $(basename "$f" .txt)"
    grep -Ei "committed|ratio|control|measurable|checkpoints:|result:" "$f" | head -20 || true
done
