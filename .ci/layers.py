#!/usr/bin/env python3
"""Checks that every crate's top-level modules import only the modules
listed below them in the layer file (`layers.toml` at the repository root).

Usage: layers.py [--config FILE] [--graph]

The layer file has one table per crate:

    [crate.lockgate]
    src = "engine/src"
    order = ["util", "types", ...]    # bottom to top

A top-level module is one declared by the crate root (`lib.rs` or
`main.rs`); a folder counts as one module, its files included. Module A
imports module B when any of A's files names an item that B defines, as
`module-cycles.py` finds it (`use` paths, inline `crate::` paths, names
reached through re-exports; a `mod.rs`'s `pub use` of another top-level
module counts as an import). The crate root itself is the facade and may
name anything. A module may import only modules listed before it; every
top-level module must be listed, and every listed one must exist.

Exit status: 0 when every crate keeps its order, 1 when an import goes
up (each is printed with the file that makes it), 2 on a bad layer file.
`--graph` prints every crate's top-level imports.
"""

import importlib.util
import os
import sys
import tomllib

HERE = os.path.dirname(os.path.abspath(__file__))


def load_cycles_module():
    spec = importlib.util.spec_from_file_location(
        "module_cycles", os.path.join(HERE, "module-cycles.py")
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def top_level_modules(crate):
    """The modules the crate root declares."""
    return {m[0] for m in crate.files if len(m) == 1}


def check_crate(cycles, name, spec, base, graph):
    """Returns the problems found in one crate (a list of strings)."""
    src = os.path.join(base, spec.get("src", ""))
    order = spec.get("order")
    if not os.path.isdir(src) or not isinstance(order, list):
        return None
    crate = cycles.Crate(src)
    rank = {m: i for i, m in enumerate(order)}
    problems = []
    declared = top_level_modules(crate)
    for m in sorted(declared - set(order)):
        problems.append(f"{name}: module `{m}` is not in the layer order")
    for m in sorted(set(order) - declared):
        problems.append(f"{name}: `{m}` is in the layer order but not a module of {src}")
    if len(rank) != len(order):
        problems.append(f"{name}: a module is listed twice in the layer order")
    edges = crate.edges()
    seen = set()
    for mod in sorted(edges):
        if not mod:
            continue  # the crate root: the facade
        for dep in sorted(edges[mod]):
            if not dep or dep[0] == mod[0]:
                continue
            a, b = mod[0], dep[0]
            if graph and (a, b) not in seen:
                seen.add((a, b))
                print(f"{name}: {a} -> {b}")
            if a in rank and b in rank and rank[b] > rank[a]:
                problems.append(
                    f"{name}: `{a}` imports `{b}`, which is above it "
                    f"({crate.files[mod]} uses {'::'.join(dep)})"
                )
    return problems


def main(argv):
    config = os.path.join(HERE, "..", "layers.toml")
    graph = "--graph" in argv
    args = [a for a in argv[1:] if a != "--graph"]
    if args[:1] == ["--config"] and len(args) >= 2:
        config = args[1]
        args = args[2:]
    if args:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    try:
        with open(config, "rb") as f:
            layers = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        print(f"cannot read the layer file {config}: {e}", file=sys.stderr)
        return 2
    base = os.path.dirname(os.path.abspath(config))
    cycles = load_cycles_module()
    crates = layers.get("crate", {})
    if not crates:
        print(f"{config} lists no [crate.NAME] table", file=sys.stderr)
        return 2
    problems = []
    for name, spec in crates.items():
        found = check_crate(cycles, name, spec, base, graph)
        if found is None:
            print(f"{config}: [crate.{name}] needs `src` (a folder) and `order` (a list)",
                  file=sys.stderr)
            return 2
        problems += found
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} problem(s) with the layer order of {config}")
        return 1
    print(f"{len(crates)} crates keep the layer order of {os.path.basename(config)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
