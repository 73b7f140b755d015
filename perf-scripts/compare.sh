#!/usr/bin/env bash
# Two lockgate commands run alternately; medians, spreads and ratios.
set -euo pipefail

usage() {
    cat <<'USAGE'
usage: perf-scripts/compare.sh [-h] [-n N] 'A args' 'B args'

Runs `lockgate A args --json FILE` and `lockgate B args --json FILE`
(target/release/lockgate, built if missing) alternately N times (default
5: A B A B ...), so that drifting machine load hits both alike, and prints
for each figure the median, the spread (min-max) of A and of B and the
ratio of the medians B/A:
  records_per_s, latency_ns p50/p99/p999/max, checkpoints completed,
  checkpoints.duration_ns p50/p99, checkpoints.alignment_ns p50,
  checkpoints.persisted_bytes p50 (the
  in-flight bytes unaligned checkpoints persist), peak_rss_bytes.
A run that fails (non-zero exit) stops the comparison. Reads the JSON with
jq when present, else python3.

Example:
  perf-scripts/compare.sh -n 3 \
    'loadgen --workload w2 --duration 5 --warmup 1 --checkpoint none --quiet' \
    'loadgen --workload w2 --duration 5 --warmup 1 --checkpoint exactly-once --quiet'
USAGE
}

source "$(dirname "$0")/common.sh"

n=5
while [[ $# -gt 0 ]]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        -n) [[ $# -ge 2 ]] || die "-n needs a count"; n="$2"; shift 2 ;;
        --) shift; break ;;
        -*) usage >&2; die "unknown option '$1'" ;;
        *) break ;;
    esac
done
[[ $# -eq 2 ]] || { usage >&2; die "need exactly two quoted argument lists, A and B"; }
[[ "$n" =~ ^[1-9][0-9]*$ ]] || die "-n: '$n' is not a positive whole number"
a_args="$1"
b_args="$2"
command -v jq >/dev/null 2>&1 || need_tool python3 "apt-get install python3 (or jq: apt-get install jq)"
ensure_lockgate

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

FIGURES=(.records_per_s .latency_ns.p50 .latency_ns.p99 .latency_ns.p999 .latency_ns.max .checkpoints.completed .checkpoints.duration_ns.p50 .checkpoints.duration_ns.p99 .checkpoints.alignment_ns.p50 .checkpoints.persisted_bytes.p50 .peak_rss_bytes)

for i in $(seq 1 "$n"); do
    for side in A B; do
        if [[ "$side" == A ]]; then args="$a_args"; else args="$b_args"; fi
        json="$tmp/$side.$i.json"
        echo "run $i/$n $side: lockgate $args" >&2
        # Word splitting of the argument list is intended (quoted by the caller).
        # shellcheck disable=SC2086
        "$LOCKGATE_BIN" $args --json "$json" >"$tmp/$side.$i.log" 2>&1 || {
            cat "$tmp/$side.$i.log" >&2
            die "run $i of $side failed"
        }
        for f in "${FIGURES[@]}"; do
            json_get "$json" "$f" >> "$tmp/$side${f//./_}"
        done
    done
done

echo "A: lockgate $a_args"
echo "B: lockgate $b_args"
echo "$n runs each, alternated; median [min-max]"
python3 - "$tmp" "${FIGURES[@]}" <<'PY'
import statistics, sys
tmp, figs = sys.argv[1], sys.argv[2:]
def vals(side, f):
    out = []
    for line in open(f"{tmp}/{side}{f.replace('.', '_')}"):
        line = line.strip()
        if line and line != "null":
            out.append(float(line))
    return out
def fmt(v):
    return f"{v:,.0f}"
print(f"{'figure':<28}{'A median [min-max]':>36}{'B median [min-max]':>36}{'B/A':>8}")
for f in figs:
    a, b = vals("A", f), vals("B", f)
    cell = lambda v: f"{fmt(statistics.median(v))} [{fmt(min(v))}-{fmt(max(v))}]" if v else "-"
    ratio = "-"
    if a and b and statistics.median(a) != 0:
        ratio = f"{statistics.median(b) / statistics.median(a):.3f}"
    print(f"{f.lstrip('.'):<28}{cell(a):>36}{cell(b):>36}{ratio:>8}")
PY
