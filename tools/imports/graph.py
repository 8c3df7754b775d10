#!/usr/bin/env python3
"""File-level import graph of one of wgemma's crates (the library by default): prints its
import circles and the arrows that point up its layer order (the layout shows the layers,
and no file may use a higher layer or sit on a circle).

    python3 tools/imports/graph.py [--src crates/wgemma/src] [--edges]

It reads `crate::`, `super::` and `self::` paths in every .rs file (comments and string
literals skipped; `{...}` groups expanded) and resolves each to the file that defines the
item. Re-exports (`pub use`) are followed to the file that defines the item, so a path
through a folder's mod.rs counts as an arrow to the real file; a `pub use` itself is no
arrow. `mod x;` declarations are no arrows either. An arrow between two top-level folders
(or files) counts as upward when the target's layer comes later in the crate's LAYERS than
the source's. Exit status 1 when it finds a circle or an upward arrow, so CI can hold the
line (tools/imports/check.py runs it over every crate).
"""
import argparse
import os
import re
import sys

# Each crate's layers, bottom up: the top-level folders and files of its src. A file may use
# its own layer and the layers before it; one not listed (lib.rs, main.rs) may use any.
# The library's are listed the same way in lib.rs and docs/ARCHITECTURE.md.
LAYERS_BY_CRATE = {
    "wgemma": ["error", "gpu", "harness", "ops", "weights", "model", "text", "formats",
               "generate", "session"],
    # The protocol knows no transport; the HTTP layer no handler; the handlers no router.
    "wgemma-server": ["error", "metrics", "openai", "http", "worker", "app", "handlers",
                      "routes", "fuzzing"],
    "wgemma-cli": ["signals", "timing", "progress", "files", "load", "args", "commands"],
    "wgemma-web": [],
}
LAYERS = LAYERS_BY_CRATE["wgemma"]

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def strip_comments_and_strings(text):
    """Blanks out comments and string/char literals, keeping line structure."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and (i == 0 or not text[i - 1].isalnum()):
            m = re.match(r'r(#*)"', text[i:])
            end = '"' + m.group(1)
            j = text.find(end, i + len(m.group(0)))
            j = n if j < 0 else j + len(end)
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append("\n" * text.count("\n", i, j + 1))
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i:i + 4]):
            m = re.match(r"'(\\.|[^\\'])'", text[i:i + 4])
            i += len(m.group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


def expand_groups(path):
    """`a::{b, c::{d, e}}` -> [a::b, a::c::d, a::c::e] (`self` in a group is the prefix)."""
    path = re.sub(r"\s+as\s+", "@", path)  # `x as y` -> `x@y`
    path = re.sub(r"\s+", "", path)
    m = re.search(r"\{", path)
    if not m:
        return [path]
    prefix, depth, parts, cur = path[:m.start()], 0, [], ""
    for ch in path[m.start() + 1:]:
        if ch == "{":
            depth += 1
        elif ch == "}":
            if depth == 0:
                break
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    out = []
    for p in parts:
        if not p:
            continue
        if p == "self":
            out.append(prefix.rstrip(":"))
        else:
            out.extend(expand_groups(prefix + p))
    return out


class Crate:
    def __init__(self, src, root=None):
        """`root`: the file that is the crate root besides lib.rs (a test binary's main.rs)."""
        self.src = src
        self.root = root
        self.files = {}  # module path tuple -> file (relative)
        for root, _, names in os.walk(src):
            for name in names:
                if name.endswith(".rs"):
                    rel = os.path.relpath(os.path.join(root, name), src).replace(os.sep, "/")
                    self.files[self.module_of(rel)] = rel
        self.text = {f: strip_comments_and_strings(open(os.path.join(src, f)).read())
                     for f in self.files.values()}
        self.reexports = {}  # module -> {name: absolute path}
        for mod, f in self.files.items():
            self.reexports[mod] = {}
            for stmt, line in self.statements(f, pub_only=True):
                for p in expand_groups(stmt):
                    absolute = self.absolute(mod, p.split("::"))
                    if absolute is None:
                        continue
                    name = absolute[-1]
                    m = re.match(r".*@(" + IDENT + ")$", p)
                    self.reexports[mod][m.group(1) if m else name] = absolute

    def module_of(self, rel):
        if rel == self.root:
            return ()
        segs = rel[:-3].split("/")
        if segs[-1] in ("mod", "lib"):
            segs = segs[:-1]
        return tuple(segs)

    def statements(self, f, pub_only=False):
        """(path text, line) of each `use` (or only `pub use`) statement at any depth."""
        text = self.text[f]
        pat = r"\bpub(?:\([^)]*\))?\s+use\s+([^;]+);" if pub_only else r"(?<!pub )\buse\s+([^;]+);"
        for m in re.finditer(pat, text):
            yield m.group(1), text.count("\n", 0, m.start()) + 1

    def absolute(self, mod, segs):
        """Absolute module path of `segs` used in module `mod`, or None (external crate)."""
        segs = [s for s in segs if s]
        if not segs:
            return None
        segs[-1] = segs[-1].split("@")[0]  # `x as y` (see expand_groups)
        if segs[0] == "crate":
            return tuple(segs[1:])
        if segs[0] in ("super", "self"):
            base = list(mod)
            while segs and segs[0] in ("super", "self"):
                if segs[0] == "super":
                    base = base[:-1]
                segs = segs[1:]
            return tuple(base + segs)
        # A path relative to this module (a child module, as mod.rs files use them).
        if (mod + (segs[0],)) in self.files:
            return tuple(mod) + tuple(segs)
        return None

    def resolve(self, path, seen=()):
        """The file defining the item at absolute `path` (following re-exports)."""
        path = tuple(p for p in path if p != "*")
        for cut in range(len(path), -1, -1):
            mod = path[:cut]
            if mod in self.files:
                rest = path[cut:]
                if rest and rest[0] in self.reexports.get(mod, {}) and path not in seen:
                    return self.resolve(self.reexports[mod][rest[0]] + rest[1:], seen + (path,))
                return self.files[mod]
        return None

    def edges(self):
        out = {}
        for mod, f in self.files.items():
            text = self.text[f]
            targets = set()
            # Inline modules: `super::` inside `mod x { ... }` starts one level deeper.
            inline_spans = []
            for m in re.finditer(r"\bmod\s+(" + IDENT + r")\s*\{", text):
                depth, j = 1, m.end()
                while j < len(text) and depth:
                    depth += {"{": 1, "}": -1}.get(text[j], 0)
                    j += 1
                inline_spans.append((m.start(), j, m.group(1)))

            def mod_at(pos):
                inner = [s for s in inline_spans if s[0] <= pos < s[1]]
                return mod + tuple(s[2] for s in sorted(inner))

            spans = [(m.start(), m.group(1)) for m in re.finditer(r"(?<!pub )(?<!\)\s)\buse\s+([^;]+);", text)
                     if not re.search(r"\bpub(?:\([^)]*\))?\s+$", text[max(0, m.start() - 20):m.start()])]
            used = set()
            for start, stmt in spans:
                used.update(range(start, start + len(stmt) + 5))
                for p in expand_groups(stmt):
                    a = self.absolute(mod_at(start), p.split("::"))
                    if a is not None:
                        targets.add(self.resolve(a))
            # Paths in code: crate::a::b, super::a, self::a (outside `use` lines).
            for m in re.finditer(r"(?<![A-Za-z0-9_:])((?:crate|super|self)(?:::" + IDENT + r")+)", text):
                if m.start() in used:
                    continue
                a = self.absolute(mod_at(m.start()), m.group(1).split("::"))
                if a is not None:
                    targets.add(self.resolve(a))
            targets.discard(None)
            targets.discard(f)
            out[f] = targets
        return out


def layer_of(f, layers=None):
    layers = LAYERS if layers is None else layers
    top = f.split("/")[0]
    top = top[:-3] if top.endswith(".rs") else top
    return layers.index(top) if top in layers else -1


def layers_of(src):
    """The layer list of the crate whose src folder is `src` (crates/<name>/src)."""
    name = os.path.basename(os.path.dirname(os.path.abspath(src)))
    return LAYERS_BY_CRATE.get(name, [])


def upward(edges, layers):
    """Arrows from a file to a later layer than its own."""
    return [(a, b) for a in sorted(edges) for b in sorted(edges[a])
            if layer_of(a, layers) >= 0 and layer_of(b, layers) > layer_of(a, layers)]


def circles(edges):
    """Strongly connected components with more than one file (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

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

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--src", default=os.path.join(here, "../../crates/wgemma/src"))
    ap.add_argument("--edges", action="store_true", help="print every arrow too")
    args = ap.parse_args()
    crate = Crate(args.src)
    edges = crate.edges()
    if args.edges:
        for f in sorted(edges):
            for t in sorted(edges[f]):
                print(f"{f} -> {t}")
    comps = circles(edges)
    print(f"circles: {len(comps)}")
    for comp in comps:
        inner = [f"{a} -> {b}" for a in comp for b in sorted(edges[a]) if b in comp]
        print(f"  {len(comp)} files: " + ", ".join(comp))
        for e in inner:
            print(f"    {e}")
    up = upward(edges, layers_of(args.src))
    print(f"upward arrows: {len(up)}")
    for a, b in up:
        print(f"  {a} -> {b}")
    n = sum(len(v) for v in edges.values())
    print(f"files: {len(edges)}, arrows: {n}")
    return 1 if comps or up else 0


if __name__ == "__main__":
    sys.exit(main())
