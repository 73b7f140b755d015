# shellcheck shell=bash
# Shared helpers of perf-scripts/*.sh (sourced, not run).
#
# LOCKGATE_BIN: the binary the scripts run (default: target/release/lockgate
# of this checkout, built with `cargo build --release -p lockgate-cli` when
# missing).
# LOCKGATE_PREBUILT=1: run no cargo at all, for a machine that got the
# release binaries copied into target/ and has no toolchain (a missing
# binary is then an error; perf-scripts/suite.sh explains the layout).
# Unset, empty or 0: build what is missing.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LOCKGATE_BIN="${LOCKGATE_BIN:-$ROOT/target/release/lockgate}"

# prebuilt: whether LOCKGATE_PREBUILT asks for no cargo (set, not 0).
prebuilt() {
    [[ -n "${LOCKGATE_PREBUILT:-}" && "${LOCKGATE_PREBUILT}" != 0 ]]
}

die() {
    echo "error: $*" >&2
    exit 2
}

# need_tool TOOL HOW: exits 3 with the install hint HOW when TOOL is absent.
need_tool() {
    if ! command -v "$1" >/dev/null 2>&1; then
        echo "error: '$1' is not installed; install it with: $2" >&2
        exit 3
    fi
}

# The release binary, built when missing.
ensure_lockgate() {
    if prebuilt; then
        [[ -x "$LOCKGATE_BIN" ]] || die "no binary at $LOCKGATE_BIN (LOCKGATE_PREBUILT is set: nothing is built)"
        return
    fi
    if [[ ! -x "$LOCKGATE_BIN" ]]; then
        echo "building $LOCKGATE_BIN (cargo build --release -p lockgate-cli)..." >&2
        (cd "$ROOT" && cargo build --release -p lockgate-cli >&2)
    fi
    [[ -x "$LOCKGATE_BIN" ]] || die "no binary at $LOCKGATE_BIN after the build"
}

# bench_bin NAME: the path of the benches binary NAME
# (target/release/NAME), built with `cargo build --release -p
# lockgate-benches --bin NAME` when missing.
bench_bin() {
    local bin="$ROOT/target/release/$1"
    if prebuilt; then
        [[ -x "$bin" ]] || die "no binary at $bin (LOCKGATE_PREBUILT is set: nothing is built)"
        echo "$bin"
        return
    fi
    if [[ ! -x "$bin" ]]; then
        echo "building $bin (cargo build --release -p lockgate-benches --bin $1)..." >&2
        (cd "$ROOT" && cargo build --release -p lockgate-benches --bin "$1" >&2)
    fi
    [[ -x "$bin" ]] || die "no binary at $bin after the build"
    echo "$bin"
}

# callgrind_total: reads valgrind's output on stdin and prints the
# instructions callgrind collected ("Collected : N").
callgrind_total() {
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}

# A JSON reader: jq when present, else python3. json_get FILE EXPR prints
# the value at EXPR, a jq-style path of object keys such as
# `.latency_ns.p99` (no arrays), or "null" when it is absent.
json_get() {
    local file="$1" expr="$2"
    if command -v jq >/dev/null 2>&1; then
        jq -r "$expr" "$file"
    else
        python3 - "$file" "$expr" <<'PY'
import json, sys
v = json.load(open(sys.argv[1]))
for k in [p for p in sys.argv[2].split(".") if p]:
    v = v.get(k) if isinstance(v, dict) else None
print("null" if v is None else v)
PY
    fi
}
