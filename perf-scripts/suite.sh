#!/usr/bin/env bash
# The measurements of issues 10 and 12 in one run, for a machine lent for a
# few minutes (e.g. one with more cores than the 2 of the development VM):
# w1-compare.sh (W1 against the raw pipeline, checkpoint modes, workers),
# checkpoint-cost.sh (what checkpoints cost W1, W2, W2 with 1,000,000 keys,
# W4) and latency-compare.sh (W2/W3 against raw and timely), each under a
# time limit, each one's output written to OUT_DIR as soon as it ends, so a
# run cut short still leaves what it finished.
#
# The binaries must already be in place (target/release/{lockgate,w1,
# raw_paced}, target/timely/release/lockgate-timely); nothing is built:
# LOCKGATE_PREBUILT=1 is set for the scripts it runs (common.sh). To take
# them to another machine, copy them stripped, e.g.
#   mkdir -p devbin && for b in lockgate w1 raw_paced; do strip -o devbin/$b target/release/$b; done
#   strip -o devbin/lockgate-timely target/timely/release/lockgate-timely
# and on the other machine put them back under target/ before running this.
#
# usage: perf-scripts/suite.sh [-o OUT_DIR] [-n ROUNDS] [-d SECONDS]
#   -n: rounds of each comparison (default 3; w1-compare runs 2n+1)
#   -d: seconds recorded per W2/W3/W4 run (default 4, after 1 s of warm-up)
set -euo pipefail
source "$(dirname "$0")/common.sh"

out_dir=.
rounds=3
secs=4
usage() {
    echo "usage: $0 [-o OUT_DIR (default .)] [-n ROUNDS (default 3)] [-d SECONDS (default 4)]"
}
while getopts "o:n:d:h" opt; do
    case $opt in
        o) out_dir=$OPTARG ;;
        n) rounds=$OPTARG ;;
        d) secs=$OPTARG ;;
        h) usage; exit 0 ;;
        *) usage >&2; exit 2 ;;
    esac
done
[[ "$rounds" =~ ^[1-9][0-9]?$ ]] || die "-n: '$rounds' is not a whole number from 1 to 99"
[[ "$secs" =~ ^[1-9][0-9]?$ ]] || die "-d: '$secs' is not a whole number of seconds from 1 to 99"
mkdir -p "$out_dir" || die "cannot create $out_dir"
export LOCKGATE_PREBUILT=1
for b in "$LOCKGATE_BIN" "$ROOT/target/release/w1" "$ROOT/target/release/raw_paced" \
    "$ROOT/target/timely/release/lockgate-timely"; do
    [[ -x "$b" ]] || die "no binary at $b (build it, or copy it there)"
done

{
    echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)," \
        "$(free -g | awk '/^Mem:/ {print $2}') GiB; kernel $(uname -r)"
    echo "commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo "${LOCKGATE_COMMIT:-unknown}")"
    echo "date: $(date -u '+%F %T') UTC; load: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "command: perf-scripts/suite.sh -n $rounds -d $secs"
} | tee "$out_dir/machine.txt"

# part NAME LIMIT_S COMMAND...: runs COMMAND under a time limit, its
# output to OUT_DIR/NAME.txt.
part() {
    local name="$1" limit="$2"
    shift 2
    echo "== $name (limit ${limit}s): $*" >&2
    local rc=0
    timeout "$limit" "$@" >"$out_dir/$name.txt" 2>"$out_dir/$name.err" || rc=$?
    echo "== $name: exit $rc, load $(cut -d' ' -f1 /proc/loadavg)" >&2
    tail -n 40 "$out_dir/$name.txt" >&2
}

part w1 180 "$ROOT/perf-scripts/w1-compare.sh" -n $((2 * rounds + 1)) -w 2
part checkpoint-cost 300 "$ROOT/perf-scripts/checkpoint-cost.sh" -n "$rounds" -d "$secs" \
    -r 20000000 "$LOCKGATE_BIN"
part latency 300 "$ROOT/perf-scripts/latency-compare.sh" -n "$rounds" --duration "$secs" --warmup 1
