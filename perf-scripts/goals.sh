#!/usr/bin/env bash
# The latency goals of committed output (issue 35), judged as the issue
# says: per goal, runs of DURATION seconds with `--ab` until JUDGED of them
# are judged (the run's A/A control ratio within 1 +- 0.1), at most TRIES
# runs; `perf-scripts/quiet-check.sh -s 5` runs just before each run and
# its summary is printed beside it. Each goal's figures are the medians
# over its judged runs; a goal with fewer judged runs is "not judged".
# Nothing else may run on the machine meanwhile.
#
# Goals (W2 at its default 200,000 records/s, exactly-once, --output
# committed except at 100 ms):
#   w2-10-workers   10 ms, --workers 2: committed p99, --ab p50/p99 ratios, e2e p50
#   w2-10-threads   10 ms, a thread per task: the same
#   w2-100-workers  the default 100 ms, --workers 2: --ab p99 ratio
#   w2-100-threads  100 ms, a thread per task: --ab p99 ratio
#   w2-1m-workers   10 ms, --keys 1000000, --workers 2: committed p99
#   w2-1m-threads   10 ms, --keys 1000000, a thread per task: committed p99
#   w1-10           W1 at 10 ms (a thread per task): records/s on/off and the
#                   checkpoints completed in the on segments against the
#                   interval's rate
#
# usage: perf-scripts/goals.sh [-g GOAL,...] [-n JUDGED (5)] [-t TRIES (10)] [-d DURATION (30)] [-o DIR]
set -euo pipefail

goals="w2-10-workers,w2-10-threads,w2-100-workers,w2-100-threads,w2-1m-workers,w2-1m-threads,w1-10"
judged=5
tries=10
duration=30
out=""
usage() {
  echo "usage: $0 [-g GOAL,... (default all)] [-n JUDGED (5)] [-t TRIES (10)] [-d DURATION s (30)] [-o DIR (runs' JSON; default a temporary folder)]"
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
}
while getopts "g:n:t:d:o:h" opt; do
  case $opt in
    g) goals=$OPTARG ;;
    n) judged=$OPTARG ;;
    t) tries=$OPTARG ;;
    d) duration=$OPTARG ;;
    o) out=$OPTARG ;;
    h) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
done
for v in "judged:$judged" "tries:$tries" "duration:$duration"; do
  [[ ${v#*:} =~ ^[1-9][0-9]*$ ]] || { echo "error: ${v%%:*} must be a positive whole number, got '${v#*:}'" >&2; exit 2; }
done
# After a switch, 200 ms count for neither group: segments of 0.3 s at
# least, 66 of them.
(( duration >= 20 )) || { echo "error: --ab needs 66 segments of 0.3 s or more: -d must be 20 or more, got $duration" >&2; exit 2; }
command -v python3 >/dev/null || { echo "error: python3 is needed (Debian: apt-get install python3)" >&2; exit 3; }
here="$(cd "$(dirname "$0")/.." && pwd)"
bin="$here/target/release/lockgate"
if [[ ! -x "$bin" ]]; then
  echo "building (cargo build --release -p lockgate-cli)..." >&2
  (cd "$here" && cargo build --release -q -p lockgate-cli >&2)
fi
if [[ -z "$out" ]]; then
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi
mkdir -p "$out"
# Segments: the longest that gives 20 a group in the run, below 1 s.
seg=$(python3 -c "print(f'{min(0.9, $duration / 66):.2f}')")

args_of() { # goal -> loadgen arguments
  local w2p=(--workload w2 --duration "$duration" --warmup 1 --checkpoint exactly-once --ab "$seg")
  local w2=("${w2p[@]}" --output committed)
  case $1 in
    w2-10-workers) echo "${w2[*]} --checkpoint-interval-ms 10 --workers 2" ;;
    w2-10-threads) echo "${w2[*]} --checkpoint-interval-ms 10" ;;
    # The 100 ms goals are the record path's: processing output (with
    # committed output an off segment's open transaction grows for the
    # whole segment, which its tail shows and the A/A control with it).
    w2-100-workers) echo "${w2p[*]} --checkpoint-interval-ms 100 --workers 2" ;;
    w2-100-threads) echo "${w2p[*]} --checkpoint-interval-ms 100" ;;
    w2-1m-workers) echo "${w2[*]} --checkpoint-interval-ms 10 --keys 1000000 --workers 2" ;;
    w2-1m-threads) echo "${w2[*]} --checkpoint-interval-ms 10 --keys 1000000" ;;
    # W1 is a closed loop: enough records for about DURATION seconds at
    # ~30 M records/s on 2 cores.
    w1-10) echo "--workload w1 --records $((duration * 30000000)) --checkpoint exactly-once --checkpoint-interval-ms 10 --ab $seg" ;;
    *) echo "error: unknown goal '$1'" >&2; return 2 ;;
  esac
}

summary() { # json goal -> one line: judged? and the figures
  python3 - "$1" "$2" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
goal = sys.argv[2]
ab = r.get("ab") or {}
ratios = {x["what"]: x for x in ab.get("ratios", [])}
groups = {g["name"]: g for g in ab.get("groups", [])}
controls = [x["control"] for x in ratios.values()]
# The run is judged when its A/A control is within 1 +- 0.1 on the
# figure the goal reads (p50/p99 for W2, records/s for W1).
keys = ["records/s"] if goal.startswith("w1") else ["p50", "p99"]
judged = all(k in ratios and abs(ratios[k]["control"] - 1) <= 0.1 for k in keys)
f = {"judged": judged, "ok": r.get("ok"), "lost": r.get("lost"), "duplicated": r.get("duplicated")}
for k in ["p50", "p99", "p99.9", "records/s"]:
    if k in ratios:
        f[f"ratio {k}"] = round(ratios[k]["ratio"], 3)
        f[f"control {k}"] = round(ratios[k]["control"], 3)
on = groups.get("on", {})
c = (on.get("committed_latency_ns") or {})
if c:
    f["committed p50 ms"] = round(c["p50"] / 1e6, 2)
    f["committed p99 ms"] = round(c["p99"] / 1e6, 2)
d = (r.get("checkpoints") or {}).get("duration_ns") or {}
if d:
    f["e2e p50 ms"] = round(d["p50"] / 1e6, 2)
if goal.startswith("w1"):
    # Checkpoints completed inside the on segments' counted spans, against
    # the interval's rate over those spans.
    segs = [s for s in ab.get("segments", []) if s["group"] == 0]
    span = sum(s["end_ns"] - s["counted_from_ns"] for s in segs)
    done = [x["trigger_ns"] + x["duration_ns"] for x in r["checkpoints"]["list"] if x["status"] == "completed"]
    n = sum(1 for t in done for s in segs if s["counted_from_ns"] <= t < s["end_ns"])
    interval = r["config"].get("checkpoint_interval_ms") or 10
    f["checkpoints/s on"] = round(n / (span / 1e9), 1) if span else 0
    f["of interval rate"] = round(n / (span / 1e9) / (1000 / interval), 3) if span else 0
    f["list truncated"] = r["checkpoints"].get("list_truncated")
print(json.dumps(f))
PY
}

medians() { # goal -> the medians of the judged runs' figures
  python3 - "$out" "$1" <<'PY'
import json, glob, statistics, sys
runs = [json.loads(l) for p in sorted(glob.glob(f"{sys.argv[1]}/{sys.argv[2]}-*.line")) for l in open(p)]
j = [r for r in runs if r["judged"]]
keys = [k for k in (j[0] if j else {}) if isinstance(j[0][k], (int, float)) and not isinstance(j[0][k], bool)]
med = {k: round(statistics.median(r[k] for r in j if k in r), 3) for k in keys}
print(f"{sys.argv[2]}: {len(j)} judged of {len(runs)} runs; medians of the judged: {json.dumps(med)}")
PY
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); commit $(git -C "$here" rev-parse --short HEAD); $(date -u '+%F %H:%M') UTC"
echo "command: perf-scripts/goals.sh -g $goals -n $judged -t $tries -d $duration (segments ${seg} s)"
IFS=, read -r -a list <<<"$goals"
for goal in "${list[@]}"; do
  args=$(args_of "$goal")
  echo "== $goal: lockgate loadgen $args"
  ok=0
  for try in $(seq 1 "$tries"); do
    quiet=$("$here/perf-scripts/quiet-check.sh" -s 5 2>&1 | grep -E 'load average|longest gap' | tr '\n' ' ' | tr -s ' ')
    dir=$(mktemp -d)
    # shellcheck disable=SC2086 # $args is a list of words
    "$bin" loadgen $args --checkpoint-dir "$dir" --quiet --json "$out/$goal-$try.json" >/dev/null 2>"$out/$goal-$try.err" || true
    rm -rf "$dir"
    if [[ -s "$out/$goal-$try.json" ]]; then
      line=$(summary "$out/$goal-$try.json" "$goal")
    else
      line='{"judged": false, "error": "no report"}'
    fi
    echo "$line" >"$out/$goal-$try.line"
    echo "  run $try: $line"
    echo "    quiet-check: $quiet"
    if grep -q '"judged": true' <<<"$line"; then
      ok=$((ok + 1))
    fi
    (( ok < judged )) || break
  done
  medians "$goal"
done
