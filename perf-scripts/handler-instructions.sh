#!/usr/bin/env bash
# Instructions per element of the barrier handlers, from callgrind
# (issue 12: the aligner on unblocked channels at most 1.2x the tracker).
set -euo pipefail

usage() {
    cat <<'USAGE'
usage: perf-scripts/handler-instructions.sh [-h] [-p PASSES]

Runs target/release/handler_instructions (built when missing) under
`valgrind --tool=callgrind` for the aligner, the tracker and the loop
alone ("none"), on 2, 8 and 130 channels, with records on every channel
and with channel 0 blocked (--one-blocked), once with PASSES passes of
10,000 record batches (default 20) and once with 0, and prints the
instructions per element: (I(PASSES) - I(0)) / elements, so set-up costs
cancel; then aligner/tracker, with and without the loop's own cost.
Instruction counts repeat run to run (unlike ns on a shared machine).

Needs valgrind (Debian: apt-get install valgrind).
USAGE
}

source "$(dirname "$0")/common.sh"

passes=20
while [[ $# -gt 0 ]]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        -p) [[ $# -ge 2 ]] || die "-p needs a count"; passes="$2"; shift 2 ;;
        *) usage >&2; die "unexpected argument '$1'" ;;
    esac
done
[[ "$passes" =~ ^[1-9][0-9]*$ ]] || die "-p: '$passes' is not a whole number above 0"
need_tool valgrind "apt-get install valgrind"
bin="$(bench_bin handler_instructions)"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# instructions HANDLER PASSES CHANNELS [--one-blocked]
instructions() {
    valgrind --tool=callgrind --callgrind-out-file="$tmp/cg" "$bin" "$@" 2>&1 >/dev/null |
        callgrind_total
}

elements=$((passes * 10000))
echo "instructions per element (callgrind), $passes passes of 10,000 record batches:"
printf '%-8s %-12s %8s %8s %8s %14s %18s\n' channels input none tracker aligner aligner/tracker "(minus the loop)"
for channels in 2 8 130; do
    for input in records one_blocked; do
        flag=()
        [[ "$input" == one_blocked ]] && flag=(--one-blocked)
        declare -A per=()
        for h in none tracker aligner; do
            full="$(instructions "$h" "$passes" "$channels" "${flag[@]}")"
            empty="$(instructions "$h" 0 "$channels" "${flag[@]}")"
            per[$h]="$(python3 -c "print(f'{($full - $empty) / $elements:.1f}')")"
        done
        ratio="$(python3 -c "print(f'{${per[aligner]} / ${per[tracker]}:.2f}')")"
        net="$(python3 -c "t=${per[tracker]}-${per[none]}; a=${per[aligner]}-${per[none]}; print(f'{a / t:.2f}' if t > 0 else 'n/a')")"
        printf '%-8s %-12s %8s %8s %8s %14s %18s\n' "$channels" "$input" "${per[none]}" "${per[tracker]}" "${per[aligner]}" "$ratio" "$net"
        unset per
    done
done
