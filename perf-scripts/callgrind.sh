#!/usr/bin/env bash
# Instruction counts of one lockgate run under callgrind, and a comparison
# with a saved profile.
set -euo pipefail

usage() {
    cat <<'USAGE'
usage: perf-scripts/callgrind.sh [-h] [-n TOP] [--save FILE] [--compare FILE] -- <lockgate args>

Runs `lockgate <args> --wait-strategy park` (target/release/lockgate,
built if missing) under `valgrind --tool=callgrind --fair-sched=yes` and
prints the total instructions executed and the TOP (default 20) functions
by instructions (callgrind_annotate, inclusive of nothing: self cost).
Parking keeps idle tasks from spinning, so the count is the work, not the
waiting; callgrind serializes threads, so times mean nothing here, only
instruction counts do.

  --save FILE     keep the callgrind profile as FILE
  --compare FILE  also print the total instructions of FILE (a saved
                  profile) and of this run, the ratio this/saved, and the
                  top functions of both side by side

Needs valgrind (Debian: apt-get install valgrind, which brings
callgrind_annotate). Keep runs small: callgrind is ~50x slower.

Example:
  perf-scripts/callgrind.sh --save base.cg -- loadgen --workload w1 --records 200000 --checkpoint none --quiet
  perf-scripts/callgrind.sh --compare base.cg -- loadgen --workload w1 --records 200000 --checkpoint exactly-once --quiet
USAGE
}

source "$(dirname "$0")/common.sh"

top=20
save=""
compare=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        -n) [[ $# -ge 2 ]] || die "-n needs a count"; top="$2"; shift 2 ;;
        --save) [[ $# -ge 2 ]] || die "--save needs a file"; save="$2"; shift 2 ;;
        --compare) [[ $# -ge 2 ]] || die "--compare needs a file"; compare="$2"; shift 2 ;;
        --) shift; break ;;
        *) usage >&2; die "unexpected argument '$1' (lockgate's arguments go after --)" ;;
    esac
done
[[ $# -gt 0 ]] || { usage >&2; die "no lockgate arguments after --"; }
[[ "$top" =~ ^[0-9]+$ ]] || die "-n: '$top' is not a whole number"
if [[ -n "$compare" && ! -r "$compare" ]]; then
    die "--compare: cannot read '$compare'"
fi

need_tool valgrind "apt-get install valgrind"
need_tool callgrind_annotate "apt-get install valgrind"
ensure_lockgate

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
profile="$tmp/callgrind.out"

rc=0
valgrind --tool=callgrind --fair-sched=yes --callgrind-out-file="$profile" \
    "$LOCKGATE_BIN" "$@" --wait-strategy park 2> "$tmp/valgrind.log" || rc=$?
if [[ ! -s "$profile" ]]; then
    cat "$tmp/valgrind.log" >&2
    die "callgrind wrote no profile"
fi
[[ -z "$save" ]] || cp "$profile" "$save"

# Total instructions: the `summary:` (or `totals:`) line of the profile.
total_ir() {
    awk '/^(summary|totals):/ { print $2; exit }' "$1"
}

# The TOP functions by self instructions: "instructions function".
top_functions() {
    callgrind_annotate --inclusive=no "$1" 2>/dev/null \
        | awk '/^-+$/ { sec++ ; next } sec >= 3 && NF >= 2 && $1 ~ /^[0-9,]+$/ {
              ir=$1; $1=""; sub(/^ +/, ""); sub(/ \([^)]*\)$/, ""); sub(/^\([^)]*\) /, ""); print ir "\t" $0 }' \
        | grep -v 'PROGRAM TOTALS' \
        | sed -E 's#\t[^[:space:]]*\.(rs|c|h|S|cc|cpp):#\t#; s#\t\?\?\?:#\t#; s# \[[^]]*\]$##' \
        | awk -v n="$top" 'NR <= n'  # not head: an early close would fail the pipeline
}

this_ir="$(total_ir "$profile")"
echo "== callgrind: lockgate $* --wait-strategy park"
echo "total instructions: $this_ir"
[[ -z "$save" ]] || echo "profile saved to $save"
if [[ -z "$compare" ]]; then
    echo "== top $top functions by self instructions"
    top_functions "$profile"
else
    base_ir="$(total_ir "$compare")"
    echo "saved ($compare) total instructions: $base_ir"
    python3 -c "import sys; b,t=int(sys.argv[1].replace(',','')),int(sys.argv[2].replace(',','')); print(f'ratio this/saved: {t/b:.4f}')" "$base_ir" "$this_ir"
    top_functions "$compare" > "$tmp/a.txt"
    top_functions "$profile" > "$tmp/b.txt"
    echo "== top $top functions by self instructions: saved | this run"
    python3 - "$tmp/a.txt" "$tmp/b.txt" <<'PY'
import sys
def rows(p):
    out = []
    for line in open(p):
        ir, _, name = line.rstrip("\n").partition("\t")
        out.append((ir, name[:60]))
    return out
a, b = rows(sys.argv[1]), rows(sys.argv[2])
for i in range(max(len(a), len(b))):
    l = a[i] if i < len(a) else ("", "")
    r = b[i] if i < len(b) else ("", "")
    print(f"{l[0]:>16} {l[1]:<60} | {r[0]:>16} {r[1]}")
PY
fi
exit "$rc"
