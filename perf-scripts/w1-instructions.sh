#!/usr/bin/env bash
# Instructions per record of W1, lockgate against the raw pipeline, from
# callgrind (issue 12: lockgate at most 1.15x raw's).
set -euo pipefail

usage() {
    cat <<'USAGE'
usage: perf-scripts/w1-instructions.sh [-h] [-r RECORDS] [-- <w1 args>]

Runs target/release/w1 (built when missing) under
`valgrind --tool=callgrind --fair-sched=yes` for `--pipeline raw` and
`--pipeline lockgate`, each once with RECORDS records (default 250000)
and once with 3 x RECORDS, and prints the instructions of each run and
the instructions per record, (I(3R) - I(R)) / 2R, so that the fixed
costs of a run (building the job, allocating histograms, computing the
expected result) cancel, as perf-scripts/handler-instructions.sh does;
then lockgate / raw, per record and for the whole RECORDS run. RECORDS
is at most 1000000000 (callgrind runs ~50x slower than native). Extra
arguments after -- go to the lockgate pipeline only (w1's options, e.g.
`--checkpoint exactly-once --interval-ms 2000`: raw takes no
checkpoints, so the ratio is then that of lockgate with checkpoints
against raw without; `--metrics prometheus` installs the Prometheus
recorder the CLI's --metrics-addr serves, so that the job's sampler and
checkpoint metrics record into it).
Instruction counts repeat run to run, whatever the machine's load.

Needs valgrind (Debian: apt-get install valgrind). Takes about a minute
per million records.
USAGE
}

source "$(dirname "$0")/common.sh"

records=250000
while [[ $# -gt 0 ]]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        -r) [[ $# -ge 2 ]] || die "-r needs a count"; records="$2"; shift 2 ;;
        --) shift; break ;;
        *) usage >&2; die "unexpected argument '$1'" ;;
    esac
done
[[ "$records" =~ ^[1-9][0-9]*$ ]] || die "-r: '$records' is not a whole number above 0"
((${#records} <= 10 && records <= 1000000000)) || die "-r: '$records' is above 1000000000"
need_tool valgrind "apt-get install valgrind"
bin="$(bench_bin w1)"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# instructions PIPELINE RECORDS [w1 args]
instructions() {
    local pipeline="$1" n="$2"
    shift 2
    local out rc=0
    out="$(valgrind --tool=callgrind --fair-sched=yes --callgrind-out-file="$tmp/cg" \
        "$bin" --pipeline "$pipeline" --records "$n" "$@" 2>&1)" || rc=$?
    if ((rc != 0)); then
        die "w1 --pipeline $pipeline --records $n $* failed (exit $rc): $(grep -v '^==' <<<"$out" | head -3)"
    fi
    grep -q '"exact":true' <<<"$out" || die "$pipeline with $n records was not exact: $(grep -v '^==' <<<"$out")"
    callgrind_total <<<"$out"
}

big=$((records * 3))
declare -A small=() large=()
for p in raw lockgate; do
    extra=()
    [[ "$p" == lockgate ]] && extra=("$@")
    small[$p]="$(instructions "$p" "$records" "${extra[@]}")"
    large[$p]="$(instructions "$p" "$big" "${extra[@]}")"
done
echo "W1 instructions (callgrind) with $records and $big records, and per record:"
printf '%-10s %16s %16s %18s\n' pipeline "I($records)" "I($big)" "instr./record"
for p in raw lockgate; do
    per="$(python3 -c "print(f'{(${large[$p]} - ${small[$p]}) / (2 * $records):.1f}')")"
    printf '%-10s %16s %16s %18s\n' "$p" "${small[$p]}" "${large[$p]}" "$per"
done
python3 - "${small[raw]}" "${large[raw]}" "${small[lockgate]}" "${large[lockgate]}" "$records" <<'PY'
import sys
rs, rl, ls, ll, n = (int(x) for x in sys.argv[1:])
print(f"lockgate / raw per record: {(ll - ls) / (rl - rs):.3f}")
print(f"lockgate / raw, whole {n}-record runs: {ls / rs:.3f} (fixed costs included)")
PY
