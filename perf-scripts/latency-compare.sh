#!/usr/bin/env bash
# W2 and W3 latency of lockgate, the raw pipeline and timely, run alternately.
set -euo pipefail

usage() {
    cat <<'USAGE'
usage: perf-scripts/latency-compare.sh [-h] [-n N] [--duration SECS] [--warmup SECS] [--rate R] [--workloads "w2 w3"] [--workers W]

For each workload (default: w2 then w3), runs N times (default 3), one
system after the other in each round so that drifting machine load hits
all alike:
  lockgate-none   lockgate loadgen, no checkpoints
  lockgate-eo100  lockgate loadgen, exactly-once checkpoints every 100 ms
  pool-none       lockgate loadgen --workers W (default 2: W cooperative
                  worker threads, as timely's), no checkpoints
  pool-eo100      the same, exactly-once checkpoints every 100 ms
  raw             target/release/raw_paced (the raw crossbeam pipeline,
                  paced the same way)
  timely          target/timely/release/lockgate-timely (2 workers)
then prints the median of each latency figure (p50, p99, p99.9, max, in
µs) per system, and the records recorded. Every system records
now - intended send time at the sink; a run whose correctness check fails
stops the script.

Defaults are short: --duration 5 --warmup 1 --rate 200000 (workloads.md
says 10 s after 2 s at 200,000 records/s for the reported figures).

Binaries are built when missing: `cargo build --release -p lockgate-cli`,
`cargo build --release -p lockgate-benches --bin raw_paced` (it builds
the benches crate's dependencies too, a few minutes the first time), and
timely's crate in its own target dir (from the repository root: `cd
benches/timely && CARGO_TARGET_DIR=../../target/timely cargo build
--release --locked`, a few minutes the first time; cargo runs on it every
time, quick when nothing changed). A system that cannot be built is left
out with a note. LOCKGATE_PREBUILT=1 runs no cargo, and a missing binary
is then an error (common.sh).
USAGE
}

source "$(dirname "$0")/common.sh"

n=3
duration=5
warmup=1
rate=200000
workloads="w2 w3"
workers=2
while [[ $# -gt 0 ]]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        -n) [[ $# -ge 2 ]] || die "-n needs a count"; n="$2"; shift 2 ;;
        --duration) [[ $# -ge 2 ]] || die "--duration needs seconds"; duration="$2"; shift 2 ;;
        --warmup) [[ $# -ge 2 ]] || die "--warmup needs seconds"; warmup="$2"; shift 2 ;;
        --rate) [[ $# -ge 2 ]] || die "--rate needs records/s"; rate="$2"; shift 2 ;;
        --workloads) [[ $# -ge 2 ]] || die "--workloads needs a list"; workloads="$2"; shift 2 ;;
        --workers) [[ $# -ge 2 ]] || die "--workers needs a count"; workers="$2"; shift 2 ;;
        *) usage >&2; die "unexpected argument '$1'" ;;
    esac
done
[[ "$n" =~ ^[1-9][0-9]*$ ]] || die "-n: '$n' is not a positive whole number"
[[ "$rate" =~ ^[1-9][0-9]*$ ]] || die "--rate: '$rate' is not a positive whole number"
[[ "$workers" =~ ^[1-9][0-9]*$ ]] || die "--workers: '$workers' is not a positive whole number"
[[ "$duration" =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--duration: '$duration' is not a number of seconds"
[[ "$warmup" =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--warmup: '$warmup' is not a number of seconds"
for w in $workloads; do
    [[ "$w" == w2 || "$w" == w3 ]] || die "--workloads: '$w' is not w2 or w3"
done
command -v jq >/dev/null 2>&1 || need_tool python3 "apt-get install python3 (or jq: apt-get install jq)"

ensure_lockgate
RAW_BIN="$ROOT/target/release/raw_paced"
TIMELY_BIN="$ROOT/target/timely/release/lockgate-timely"
if prebuilt; then
    for b in "$RAW_BIN" "$TIMELY_BIN"; do
        [[ -x "$b" ]] || die "no binary at $b (LOCKGATE_PREBUILT is set: nothing is built)"
    done
fi
if [[ ! -x "$RAW_BIN" ]] && ! prebuilt; then
    echo "building raw_paced..." >&2
    (cd "$ROOT" && cargo build --release -p lockgate-benches --bin raw_paced >&2) || true
fi
# Always through cargo (quick when up to date): a stale port binary would
# compare against an older configuration of the peer (until 2026-12-01 the
# port closed its input epoch every 1 ms, which alone made timely's W2 p50
# ~565 µs instead of ~10 µs).
if ! prebuilt; then
    echo "building lockgate-timely if needed (timely-dataflow, a few minutes the first time)..." >&2
    (cd "$ROOT/benches/timely" && CARGO_TARGET_DIR="$ROOT/target/timely" cargo build --release --locked >&2) || true
fi
systems=(lockgate-none lockgate-eo100 pool-none pool-eo100)
if [[ -x "$RAW_BIN" ]]; then systems+=(raw); else echo "note: no $RAW_BIN; raw left out" >&2; fi
if [[ -x "$TIMELY_BIN" ]]; then systems+=(timely); else echo "note: no $TIMELY_BIN; timely left out" >&2; fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# run_one SYSTEM WORKLOAD JSON: one run, its JSON object in JSON.
run_one() {
    local sys="$1" w="$2" json="$3" log="$3.log"
    local common=(--workload "$w" --rate "$rate" --duration "$duration" --warmup "$warmup")
    case "$sys" in
        lockgate-none)
            "$LOCKGATE_BIN" loadgen "${common[@]}" --checkpoint none --quiet --json "$json" >"$log" 2>&1 ;;
        lockgate-eo100)
            "$LOCKGATE_BIN" loadgen "${common[@]}" --checkpoint exactly-once \
                --checkpoint-interval-ms 100 --quiet --json "$json" >"$log" 2>&1 ;;
        pool-none)
            "$LOCKGATE_BIN" loadgen "${common[@]}" --workers "$workers" --checkpoint none \
                --quiet --json "$json" >"$log" 2>&1 ;;
        pool-eo100)
            "$LOCKGATE_BIN" loadgen "${common[@]}" --workers "$workers" --checkpoint exactly-once \
                --checkpoint-interval-ms 100 --quiet --json "$json" >"$log" 2>&1 ;;
        raw)
            "$RAW_BIN" "${common[@]}" >"$json" 2>"$log" ;;
        timely)
            "$TIMELY_BIN" "${common[@]}" >"$json" 2>"$log" ;;
    esac
}

for w in $workloads; do
    for i in $(seq 1 "$n"); do
        for sys in "${systems[@]}"; do
            json="$tmp/$w.$sys.$i.json"
            echo "$w run $i/$n: $sys" >&2
            if ! run_one "$sys" "$w" "$json"; then
                cat "$json.log" >&2 || true
                die "$sys failed on $w (run $i)"
            fi
            [[ "$(json_get "$json" .ok)" == "true" ]] || die "$sys on $w: the correctness check failed ($json)"
            for f in records latency_ns.p50 latency_ns.p99 latency_ns.p999 latency_ns.max; do
                json_get "$json" ".$f" >> "$tmp/$w.$sys.${f//./_}"
            done
        done
    done
done

echo "latency from the intended send time at the sink; median of $n runs; µs"
echo "rate $rate records/s, ${duration}s recorded after ${warmup}s warm-up, $(nproc) cores, pool: $workers workers"
python3 - "$tmp" "$workloads" "${systems[@]}" <<'PY'
import statistics, sys
tmp, workloads, systems = sys.argv[1], sys.argv[2].split(), sys.argv[3:]
figs = ["latency_ns_p50", "latency_ns_p99", "latency_ns_p999", "latency_ns_max"]
for w in workloads:
    print(f"\n{w.upper()}")
    print(f"{'system':<16}{'records':>12}{'p50':>12}{'p99':>12}{'p99.9':>12}{'max':>12}")
    for s in systems:
        def med(f):
            v = [float(x) for x in open(f"{tmp}/{w}.{s}.{f}") if x.strip() not in ("", "null")]
            return statistics.median(v) if v else float("nan")
        cells = "".join(f"{med(f) / 1000:>12,.0f}" for f in figs)
        print(f"{s:<16}{med('records'):>12,.0f}{cells}")
PY
