#!/usr/bin/env bash
# A CPU flame graph (SVG) of one lockgate run: perf record + inferno.
set -euo pipefail

usage() {
    cat <<'USAGE'
usage: perf-scripts/flamegraph.sh [-h] [-o FILE.svg] [-F HZ] [--dwarf] -- <lockgate args>

Records `lockgate <args>` (target/release/lockgate, built if missing) with
`perf record -g` (frame pointers; --dwarf: `--call-graph dwarf`, better
stacks through inlined std code, bigger files) at HZ samples/s (default
999) on every thread, folds the stacks with inferno-collapse-perf and draws
them with inferno-flamegraph into FILE.svg (default flamegraph.svg). Also
prints the 15 hottest leaf functions.

Needs perf (Debian: apt-get install linux-perf) and inferno
(cargo install inferno; not installed by this script).

Example:
  perf-scripts/flamegraph.sh -o w1.svg -- loadgen --workload w1 --records 2000000 --checkpoint none --quiet
USAGE
}

source "$(dirname "$0")/common.sh"

out="flamegraph.svg"
hz=999
callgraph=(-g)
while [[ $# -gt 0 ]]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        -o) [[ $# -ge 2 ]] || die "-o needs a file"; out="$2"; shift 2 ;;
        -F) [[ $# -ge 2 ]] || die "-F needs a frequency"; hz="$2"; shift 2 ;;
        --dwarf) callgraph=(--call-graph dwarf); shift ;;
        --) shift; break ;;
        *) usage >&2; die "unexpected argument '$1' (lockgate's arguments go after --)" ;;
    esac
done
[[ $# -gt 0 ]] || { usage >&2; die "no lockgate arguments after --"; }
[[ "$hz" =~ ^[0-9]+$ ]] || die "-F: '$hz' is not a whole number"

need_tool perf "apt-get install linux-perf (Debian) or linux-tools-\$(uname -r) (Ubuntu)"
need_tool inferno-collapse-perf "cargo install inferno"
need_tool inferno-flamegraph "cargo install inferno"
ensure_lockgate

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

rc=0
perf record -F "$hz" "${callgraph[@]}" -o "$tmp/perf.data" -- "$LOCKGATE_BIN" "$@" || rc=$?
perf script -i "$tmp/perf.data" 2>/dev/null > "$tmp/perf.txt"
inferno-collapse-perf "$tmp/perf.txt" > "$tmp/folded.txt"
inferno-flamegraph --title "lockgate $*" "$tmp/folded.txt" > "$out"
echo "== flame graph: $out ($(wc -l < "$tmp/folded.txt") distinct stacks)"
echo "== hottest functions (self samples)"
perf report -i "$tmp/perf.data" --no-children -g none --sort symbol --stdio 2>/dev/null \
    | grep -v '^#' | grep -v '^$' | head -n 15 || true
exit "$rc"
