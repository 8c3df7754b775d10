#!/usr/bin/env python3
"""Long functions and long parameter lists in a crate's src (issue 27's Done-when: no
function over 120 lines, none with more than 7 parameters, no unexplained
`#[allow(clippy::too_many_arguments)]`).

    python3 tools/imports/long_functions.py [--src crates/wgemma/src] [--under ops gpu ...]

A function's length is the line count of its body, from the line of its opening `{` to the
line of its closing `}` (blank and comment lines included, as a reader scrolls them).
Parameters count as clippy's too_many_arguments counts them: every input, `self` included.
Functions without a body (trait declarations) count for parameters only. An
`#[allow(clippy::too_many_arguments)]` counts as explained when a plain `//` comment (not a
doc comment) sits just above it or at the end of its line. `--under` limits the report to files under those
folders of src. Exit status 1 when a function passes 120 lines or 7 parameters, or an
allow is unexplained, so CI can hold the line.
"""
import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from graph import strip_comments_and_strings  # noqa: E402  (same lexing as the import graph)

LONG, TOO_LONG, MAX_PARAMS = 80, 120, 7
OPEN, CLOSE = "([{", ")]}"


def skip_angles(text, i):
    """Index after the `<...>` group at text[i] (`->` inside, as in `F: Fn() -> T`, is no
    closing bracket)."""
    depth = 0
    while i < len(text):
        c = text[i]
        if c == "<":
            depth += 1
        elif c == ">" and text[i - 1] != "-":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return i


def matching(text, i):
    """Index of the bracket closing the one at text[i]."""
    depth = 0
    while i < len(text):
        c = text[i]
        if c in OPEN:
            depth += 1
        elif c in CLOSE:
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return i


def count_params(params):
    """Top-level commas of a parameter list (generic `<A, B>` and tuple types nest)."""
    if not params.strip():
        return 0
    depth, count, i = 0, 1, 0
    while i < len(params):
        c = params[i]
        if c in OPEN or c == "<":
            depth += 1
        elif c in CLOSE or (c == ">" and params[i - 1] != "-"):
            depth -= 1
        elif c == "," and depth == 0 and params[i + 1:].strip():
            count += 1
        i += 1
    return count


def functions(text):
    """(name, line of `fn`, parameters, body lines or None) for every `fn` item."""
    line_at = lambda k: text.count("\n", 0, k) + 1  # noqa: E731
    for m in re.finditer(r"\bfn\s+([A-Za-z_][A-Za-z0-9_]*)\s*", text):
        i = m.end()
        if text[i:i + 1] == "<":
            i = skip_angles(text, i)
        while i < len(text) and text[i].isspace():
            i += 1
        if text[i:i + 1] != "(":
            continue
        close = matching(text, i)
        params = count_params(text[i + 1:close])
        # The body starts at the first `{` (or a `;` ends a declaration) after the
        # signature; return types and where clauses hold no braces.
        j = close + 1
        while j < len(text) and text[j] not in "{;":
            j += 1
        body = None
        if j < len(text) and text[j] == "{":
            body = line_at(matching(text, j)) - line_at(j) + 1
        yield m.group(1), line_at(m.start()), params, body


def unexplained_allows(raw):
    """Lines of `#[allow(clippy::too_many_arguments)]` with no `//` comment saying why."""
    lines = raw.split("\n")
    out = []
    for k, line in enumerate(lines):
        if "clippy::too_many_arguments" not in line or "allow" not in line:
            continue
        above = k - 1
        while above >= 0 and lines[above].strip().startswith("#["):
            above -= 1
        # A doc comment (`///`) says what the function does, not why it takes so many
        # arguments: only a plain `//` comment counts.
        plain = lambda s: s.startswith("//") and not s.startswith(("///", "//!"))  # noqa: E731
        if "//" in line.split("]", 1)[-1] or (above >= 0 and plain(lines[above].strip())):
            continue
        out.append(k + 1)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--src", default="crates/wgemma/src")
    ap.add_argument("--under", nargs="*", default=[],
                    help="report only files under these folders of src")
    args = ap.parse_args()
    long_fns, many_params, allows = [], [], []
    for root, _, names in os.walk(args.src):
        for name in sorted(names):
            if not name.endswith(".rs"):
                continue
            path = os.path.join(root, name)
            rel = os.path.relpath(path, args.src).replace(os.sep, "/")
            if args.under and not any(rel.startswith(u.rstrip("/") + "/") or rel == u
                                      for u in args.under):
                continue
            raw = open(path).read()
            for fn, line, params, body in functions(strip_comments_and_strings(raw)):
                where = f"{rel}:{line} {fn}"
                if body is not None and body > LONG:
                    long_fns.append((body, where))
                if params > MAX_PARAMS:
                    many_params.append((params, where))
            allows += [f"{rel}:{k}" for k in unexplained_allows(raw)]
    long_fns.sort(reverse=True)
    many_params.sort(reverse=True)
    too_long = [x for x in long_fns if x[0] > TOO_LONG]
    print(f"functions over {TOO_LONG} lines: {len(too_long)}")
    for n, where in too_long:
        print(f"  {n:4} {where}")
    print(f"functions over {LONG} (up to {TOO_LONG}) lines: {len(long_fns) - len(too_long)}")
    for n, where in long_fns[len(too_long):]:
        print(f"  {n:4} {where}")
    print(f"functions with more than {MAX_PARAMS} parameters: {len(many_params)}")
    for n, where in many_params:
        print(f"  {n:4} {where}")
    print(f"#[allow(clippy::too_many_arguments)] without a why-comment: {len(allows)}")
    for where in allows:
        print(f"       {where}")
    return 1 if too_long or many_params or allows else 0


if __name__ == "__main__":
    sys.exit(main())
