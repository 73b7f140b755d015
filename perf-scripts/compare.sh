#!/usr/bin/env bash
# Two or more lockgate commands run alternately; medians, spreads and ratios.
set -euo pipefail

usage() {
    cat <<'USAGE'
usage: perf-scripts/compare.sh [-h] [-n N] 'A args' 'B args' ['C args' ...]

Runs `lockgate A args --json FILE`, `lockgate B args --json FILE` and so
on (target/release/lockgate, built if missing) alternately N times
(default 5: A B A B ..., or A B C A B C ... with three), so that drifting
machine load hits all alike, and prints for each figure the median and
the spread (min-max) of each command and the ratio of each median to A's
(B/A, C/A, ...):
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
[[ $# -ge 2 && $# -le 26 ]] || { usage >&2; die "need 2 to 26 quoted argument lists (A, B, ...)"; }
[[ "$n" =~ ^[1-9][0-9]*$ ]] || die "-n: '$n' is not a positive whole number"
all_args=("$@")
letters=ABCDEFGHIJKLMNOPQRSTUVWXYZ
names=()
for k in "${!all_args[@]}"; do
    names+=("${letters:k:1}")
done
command -v jq >/dev/null 2>&1 || need_tool python3 "apt-get install python3 (or jq: apt-get install jq)"
ensure_lockgate

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

FIGURES=(.records_per_s .latency_ns.p50 .latency_ns.p99 .latency_ns.p999 .latency_ns.max .checkpoints.completed .checkpoints.duration_ns.p50 .checkpoints.duration_ns.p99 .checkpoints.alignment_ns.p50 .checkpoints.persisted_bytes.p50 .peak_rss_bytes)

for i in $(seq 1 "$n"); do
    for k in "${!all_args[@]}"; do
        side="${names[$k]}"
        args="${all_args[$k]}"
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

for k in "${!all_args[@]}"; do
    echo "${names[$k]}: lockgate ${all_args[$k]}"
done
echo "$n runs each, alternated; median [min-max]"
python3 - "$tmp" "${names[*]}" "${FIGURES[@]}" <<'PY'
import statistics, sys
tmp, sides, figs = sys.argv[1], sys.argv[2].split(), sys.argv[3:]
def vals(side, f):
    out = []
    for line in open(f"{tmp}/{side}{f.replace('.', '_')}"):
        line = line.strip()
        if line and line != "null":
            out.append(float(line))
    return out
def fmt(v):
    return f"{v:,.0f}"
def cell(v):
    return f"{fmt(statistics.median(v))} [{fmt(min(v))}-{fmt(max(v))}]" if v else "-"
head = f"{'figure':<28}{'A median [min-max]':>36}"
for s in sides[1:]:
    head += f"{s + ' median [min-max]':>36}{s + '/A':>8}"
print(head)
for f in figs:
    a = vals("A", f)
    row = f"{f.lstrip('.'):<28}{cell(a):>36}"
    for s in sides[1:]:
        b = vals(s, f)
        ratio = "-"
        if a and b and statistics.median(a) != 0:
            ratio = f"{statistics.median(b) / statistics.median(a):.3f}"
        row += f"{cell(b):>36}{ratio:>8}"
    print(row)
PY
