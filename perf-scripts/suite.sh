#!/usr/bin/env bash
# The measurements of issues 10 and 12 in one run, for a machine lent for a
# few minutes (e.g. one with more cores than the 2 of the development VM):
# quiet-check.sh (the machine's own stalls, to read the rest against),
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
#   -n: rounds of each comparison, 1-20 (default 3; w1-compare runs 2n+1)
#   -d: seconds recorded per W2/W3/W4 run, 1-30 (default 4, after 1 s of
#   warm-up)
# Each part's time limit grows with -n and -d (printed before it starts);
# Ctrl-C or SIGTERM stops the part under way and the suite.
set -euo pipefail
source "$(dirname "$0")/common.sh"

out_dir=.
rounds=3
secs=4
usage() {
    echo "usage: $0 [-o OUT_DIR (default .)] [-n ROUNDS, 1-20 (default 3)] [-d SECONDS, 1-30 (default 4)]"
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
shift $((OPTIND - 1))
[[ $# -eq 0 ]] || { usage >&2; die "unexpected argument '$1'"; }
[[ "$rounds" =~ ^[1-9][0-9]?$ && "$rounds" -le 20 ]] || die "-n: '$rounds' is not a whole number from 1 to 20"
[[ "$secs" =~ ^[1-9][0-9]?$ && "$secs" -le 30 ]] || die "-d: '$secs' is not a whole number of seconds from 1 to 30"
[[ -n "$out_dir" ]] || die "-o: an empty folder name"
export LOCKGATE_PREBUILT=1
for b in "$LOCKGATE_BIN" "$ROOT/target/release/w1" "$ROOT/target/release/raw_paced" \
    "$ROOT/target/timely/release/lockgate-timely"; do
    [[ -x "$b" ]] || die "no binary at $b (build it, or copy it there)"
done
mkdir -p "$out_dir" || die "cannot create the folder '$out_dir'"

{
    echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)," \
        "$(free -g | awk '/^Mem:/ {print $2}') GiB; kernel $(uname -r)"
    # LOCKGATE_COMMIT: the binaries' commit, when they were built elsewhere.
    echo "commit: ${LOCKGATE_COMMIT:-$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)}"
    echo "date: $(date -u '+%F %T') UTC; load: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "command: perf-scripts/suite.sh -n $rounds -d $secs"
} | tee "$out_dir/machine.txt"

# The part under way: its `timeout`, which leads a process group of its
# own (so a terminal's Ctrl-C reaches this script only): stopping the
# suite stops that group.
running=""
stop() {
    if [[ -n "$running" ]]; then
        kill -TERM -- "-$running" 2>/dev/null || true
    fi
    echo "suite stopped; what finished is in $out_dir" >&2
    exit 130
}
trap stop INT TERM

# part NAME LIMIT_S COMMAND...: runs COMMAND under a time limit, its
# output to OUT_DIR/NAME.txt.
part() {
    local name="$1" limit="$2"
    shift 2
    echo "== $name (limit ${limit}s): $*" >&2
    local rc=0
    timeout "$limit" "$@" >"$out_dir/$name.txt" 2>"$out_dir/$name.err" &
    running=$!
    wait "$running" || rc=$?
    running=""
    if [[ $rc -eq 124 ]]; then
        echo "== $name: stopped at its limit of ${limit}s (its figures are printed only at the end)" >&2
    fi
    echo "== $name: exit $rc, load $(cut -d' ' -f1 /proc/loadavg)" >&2
    tail -n 40 "$out_dir/$name.txt" >&2
}

# Limits with room: a W1 run of 20 M records takes under 2 s on 2 cores,
# a W2/W3/W4 run its seconds plus the warm-up and about 2 s of start and
# check.
w1_rounds=$((2 * rounds + 1))
# First, how quiet the machine is (gaps without a core, steal), so the
# figures below can be read against it.
part quiet 60 "$ROOT/perf-scripts/quiet-check.sh" -s 5
part w1 $((60 + w1_rounds * 6 * 4)) "$ROOT/perf-scripts/w1-compare.sh" -n "$w1_rounds" -w 2
part checkpoint-cost $((60 + rounds * 9 * (secs + 4))) "$ROOT/perf-scripts/checkpoint-cost.sh" \
    -n "$rounds" -d "$secs" -r 20000000 "$LOCKGATE_BIN"
part latency $((60 + rounds * 12 * (secs + 3))) "$ROOT/perf-scripts/latency-compare.sh" \
    -n "$rounds" --duration "$secs" --warmup 1
