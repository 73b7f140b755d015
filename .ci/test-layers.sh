#!/usr/bin/env bash
# The layer checker's fixture test: it must pass a tree that keeps its
# order and fail, naming the import, a tree with an import of a module
# above (directly, and through a mod.rs re-export).
set -euo pipefail
cd "$(dirname "$0")"
fail() { echo "test-layers: $*" >&2; exit 1; }

out="$(python3 layers.py --config layers-fixture/good/layers.toml)" \
    || fail "the good fixture was refused: $out"
for bad in bad reexport; do
    rc=0
    out="$(python3 layers.py --config "layers-fixture/$bad/layers.toml")" || rc=$?
    [[ "$rc" == 1 ]] || fail "the $bad fixture gave exit $rc, not 1: $out"
    # The message quotes module names in backticks, literally.
    # shellcheck disable=SC2016
    want='`low` imports `high`, which is above it'
    grep -qF "$want" <<<"$out" \
        || fail "the $bad fixture's message does not name the import: $out"
done
echo "test-layers: the checker passes the good fixture and fails both bad ones"
