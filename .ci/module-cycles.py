#!/usr/bin/env python3
"""Finds import cycles between the modules of one Rust crate.

Usage: module-cycles.py SRC_DIR [--graph]

Every file under SRC_DIR is a module (`lib.rs` is the crate root, `a/mod.rs`
and `a.rs` are `a`, `a/b.rs` is `a::b`). A package with both `lib.rs` and
`main.rs` has two crate roots: they are read as one root (their modules are
distinct files; the binary reaches the library only by the crate's name,
which is not an edge). Module A depends on module B when
A's code names an item that B defines: through `use crate::..`,
`use super::..`, `use self::..`, a path written inline (`crate::b::C`), or a
name that reaches B through a facade's re-export (`pub use`). A parent's
`mod child;` and its `pub use child::X` re-exports are not dependencies:
they are how a facade is made. Comments, strings and `#[cfg(test)]` modules
are ignored (tests may reach anywhere).

Exit status: 0 when the module graph has no cycle, 1 when it has one
(each cycle is printed), 2 on bad usage. `--graph` also prints every edge.
"""

import os
import re
import sys

ITEM_RE = re.compile(
    r"^\s*pub(?:\((?:crate|super|in [\w:]+)\))?\s+"
    r"(?:unsafe\s+)?(?:async\s+)?"
    r"(?:struct|enum|trait|fn|type|const|static|union|mod|macro)\s+(\w+)",
    re.M,
)
PRIVATE_ITEM_RE = re.compile(
    r"^\s*(?:struct|enum|trait|fn|type|const|static|union)\s+(\w+)", re.M
)
MOD_RE = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", re.M)
USE_RE = re.compile(r"^\s*(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", re.M)
PATH_RE = re.compile(r"\b((?:crate|super|self)(?:::\w+)+)")


def strip(src):
    """Removes comments, string and char literals, and cfg(test) modules."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            i = n if j < 0 else j + 2
        elif c == "r" and re.match(r'r#*"', src[i:i + 10]) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            m = re.match(r'r(#*)"', src[i:])
            end = '"' + m.group(1)
            j = src.find(end, i + len(m.group(0)))
            i = n if j < 0 else j + len(end)
            out.append('""')
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            i = j + 1
            out.append('""')
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", src[i:i + 4]) or src.startswith("'\\u{", i):
            j = src.find("'", i + 1)
            i = j + 1
            out.append("' '")
        else:
            out.append(c)
            i += 1
    text = "".join(out)
    # Drop `#[cfg(test)] mod name { ... }` blocks (brace matched).
    while True:
        m = re.search(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*\{", text)
        if not m:
            break
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        text = text[: m.start()] + text[j:]
    return text


def expand_use(tree):
    """`a::{b, c::{d, e}}` -> [['a','b'], ['a','c','d'], ['a','c','e']].

    Renames (`x as y`) are removed from the text before this is called."""
    tree = re.sub(r"\s+", "", tree)
    tree = re.sub(r"^::", "", tree)

    def parse(s, prefix):
        paths = []
        depth, start = 0, 0
        parts = []
        for k, ch in enumerate(s):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == "," and depth == 0:
                parts.append(s[start:k])
                start = k + 1
        parts.append(s[start:])
        for part in parts:
            if not part:
                continue
            if "{" in part:
                head, _, rest = part.partition("{")
                head = [x for x in head.split("::") if x]
                paths += parse(rest[:-1], prefix + head)
            else:
                paths.append(prefix + [x for x in part.split("::") if x])
        return paths

    return parse(tree, [])


class Crate:
    def __init__(self, root):
        self.root = root
        self.files = {}  # module tuple -> paths (two for lib.rs + main.rs)
        for dirpath, _, names in os.walk(root):
            for name in names:
                if not name.endswith(".rs"):
                    continue
                full = os.path.join(dirpath, name)
                rel = os.path.relpath(full, root)[:-3].split(os.sep)
                if rel[0] == "bin":
                    continue
                if rel == ["lib"] or rel == ["main"]:
                    mod = ()
                elif rel[-1] == "mod":
                    mod = tuple(rel[:-1])
                else:
                    mod = tuple(rel)
                self.files.setdefault(mod, []).append(full)
        self.text = {}
        self.items = {}
        self.children = {}
        self.reexports = {}
        for mod, paths in self.files.items():
            text = ""
            for path in sorted(paths):
                with open(path, encoding="utf-8") as f:
                    text += strip(f.read()) + "\n"
            text = re.sub(r"\s+as\s+\w+", "", text)
            self.text[mod] = text
            self.children[mod] = set(MOD_RE.findall(text))
            self.items[mod] = set(ITEM_RE.findall(text)) | set(PRIVATE_ITEM_RE.findall(text))
            self.reexports[mod] = {}
        for mod, text in self.text.items():
            for m in USE_RE.finditer(text):
                if not m.group(1):
                    continue
                for path in expand_use(m.group(2)):
                    if path[-1] in ("self", "*"):
                        continue
                    self.reexports[mod][path[-1]] = path

    def absolute(self, mod, path):
        """A path as written in `mod` -> an absolute module path list."""
        path = list(path)
        if path[0] == "crate":
            return path[1:]
        base = list(mod)
        while path and path[0] in ("super", "self"):
            if path[0] == "super":
                base = base[:-1]
            path = path[1:]
            if not path:
                return None
        if path and path[0] in self.children.get(mod, ()):
            return list(mod) + path
        if base != list(mod):
            return base + path
        if path and path[0] in self.children.get(tuple(base), ()):
            return base + path
        return None  # an external crate or std

    def resolve(self, segs, depth=0):
        """Absolute path -> the module that defines its item."""
        if depth > 20:
            return None
        mod = ()
        k = 0
        while k < len(segs) and tuple(list(mod) + [segs[k]]) in self.files:
            mod = tuple(list(mod) + [segs[k]])
            k += 1
        if k == len(segs):
            return mod  # the path names a module itself
        name = segs[k]
        if name in self.items.get(mod, ()):
            return mod
        target = self.reexports.get(mod, {}).get(name)
        if target is not None:
            absolute = self.absolute(mod, target)
            if absolute is None:
                return None
            return self.resolve(absolute, depth + 1)
        return mod

    def edges(self):
        edges = {}
        for mod, text in self.text.items():
            deps = set()
            paths = []
            body = USE_RE.sub("", text)
            body = MOD_RE.sub("", body)
            for m in USE_RE.finditer(text):
                is_pub = bool(m.group(1))
                for path in expand_use(m.group(2)):
                    if path[-1] in ("self", "*"):
                        path = path[:-1]
                    if not path:
                        continue
                    # A facade re-exporting its own child is not a
                    # dependency, unless the facade's own code uses the name.
                    own = path[1:] if path[0] == "self" else path
                    if is_pub and own and own[0] in self.children[mod]:
                        if not re.search(r"\b%s\b" % re.escape(own[-1]), body):
                            continue
                    paths.append(path)
            paths += [p.split("::") for p in PATH_RE.findall(body)]
            for path in paths:
                absolute = self.absolute(mod, path)
                if absolute is None:
                    continue
                target = self.resolve(absolute)
                if target is None or target == mod:
                    continue
                deps.add(target)
            edges[mod] = deps
        return edges


def cycles(edges):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def name(mod):
    return "::".join(mod) if mod else "crate"


def main(argv):
    if len(argv) < 2 or not os.path.isdir(argv[1]):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    crate = Crate(argv[1])
    edges = crate.edges()
    if "--graph" in argv:
        for mod in sorted(edges):
            print(f"{name(mod)} -> {', '.join(name(d) for d in sorted(edges[mod]))}")
    found = cycles(edges)
    for comp in found:
        members = set(comp)
        print(f"cycle in {argv[1]}: {', '.join(name(m) for m in comp)}")
        for m in comp:
            inner = sorted(d for d in edges[m] if d in members)
            print(f"  {name(m)} -> {', '.join(name(d) for d in inner)}")
    if found:
        return 1
    print(f"{argv[1]}: {len(edges)} modules, no import cycle")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
