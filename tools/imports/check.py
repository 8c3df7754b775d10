#!/usr/bin/env python3
"""The structure checks `./dev test` runs over every crate (crates/*/, and fuzz/ outside
the workspace): the import graph of its src has no circle and no arrow up its layers
(graph.py; a crate with a src must list its layers there), the graph of each of its test
binaries (tests/NAME/main.rs and its modules) has no circle, no function is over 120 lines
(long_functions.py), and no Rust file is over 800 lines. Files over 600 lines (the style
guide's bound) are listed, to be split by role.

    python3 tools/imports/check.py [--crates crates] [--extra fuzz ...]

Exit status 1 when a check fails, naming the files. test_check.py shows it failing on each.
"""
import argparse
import glob
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from graph import LAYERS_BY_CRATE, Crate, circles, layers_of, strip_comments_and_strings, upward  # noqa: E402
from long_functions import TOO_LONG, functions  # noqa: E402

FILE_LIMIT, FILE_LONG = 800, 600

# Files over the limit whose split is under way elsewhere, with the reason; each is listed
# at every run, and an entry whose file is back under the limit fails the check (so the
# list only shrinks).
PENDING: dict[str, str] = {}


def rust_files(crate_dir):
    for root, _, names in os.walk(crate_dir):
        if os.sep + "target" in root:
            continue
        for name in sorted(names):
            if name.endswith(".rs"):
                yield os.path.join(root, name)


def graph_failures(crate_dir, name):
    """(summary, failures) of the crate's src graph and its test binaries' graphs."""
    failures, summary = [], ""
    src = os.path.join(crate_dir, "src")
    if os.path.isdir(src):
        edges = Crate(src).edges()
        comps, up = circles(edges), upward(edges, layers_of(src))
        summary = f"{len(edges)} files, {len(comps)} circles, {len(up)} upward arrows, "
        if name not in LAYERS_BY_CRATE:
            failures.append(f"{name}: no layer order: list its top-level modules, bottom up, "
                            "in LAYERS_BY_CRATE of tools/imports/graph.py")
        failures += [f"{name}: circle: {', '.join(c)}" for c in comps]
        failures += [f"{name}: upward arrow: {a} -> {b}" for a, b in up]
    for main_rs in sorted(glob.glob(os.path.join(crate_dir, "tests", "*", "main.rs"))):
        tests = os.path.dirname(main_rs)
        comps = circles(Crate(tests, root="main.rs").edges())
        where = f"{name}/tests/{os.path.basename(tests)}"
        failures += [f"{where}: circle: {', '.join(c)}" for c in comps]
    return summary, failures


def length_failures(crate_dir, base):
    """(failures, files over FILE_LONG lines, functions over TOO_LONG lines) of every Rust
    file of the crate."""
    failures, long_files, too_long = [], [], []
    for path in rust_files(crate_dir):
        rel = os.path.relpath(path, base)
        raw = open(path).read()
        lines = raw.count("\n")
        if lines > FILE_LIMIT and rel in PENDING:
            print(f"pending: {rel}: {lines} lines ({PENDING[rel]})")
        elif rel in PENDING:
            failures.append(f"{rel}: {lines} lines: remove it from PENDING")
        elif lines > FILE_LIMIT:
            failures.append(f"{rel}: {lines} lines (at most {FILE_LIMIT}: split it by role)")
        elif lines > FILE_LONG:
            long_files.append(f"{rel}: {lines} lines")
        for fn, line, _, body in functions(strip_comments_and_strings(raw)):
            if body is not None and body > TOO_LONG:
                too_long.append(f"{rel}:{line} {fn}: {body} lines")
    return failures, long_files, too_long


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--crates", default=os.path.join(here, "../../crates"))
    ap.add_argument("--extra", nargs="*", default=[os.path.join(here, "../../fuzz")],
                    help="crates outside --crates (default: fuzz/)")
    args = ap.parse_args()
    failures, long_files = [], []
    crate_dirs = sorted(glob.glob(os.path.join(args.crates, "*", "")))
    crate_dirs += [os.path.join(d, "") for d in args.extra if os.path.isdir(d)]
    for crate_dir in crate_dirs:
        name = os.path.basename(os.path.normpath(crate_dir))
        base = os.path.dirname(os.path.normpath(crate_dir))
        summary, graph_fails = graph_failures(crate_dir, name)
        length_fails, long_here, too_long = length_failures(crate_dir, base)
        print(f"{name}: {summary}{len(too_long)} functions over {TOO_LONG} lines")
        failures += graph_fails + length_fails
        failures += [f"{f} (at most {TOO_LONG}: split it)" for f in too_long]
        long_files += long_here
    print(f"files over {FILE_LONG} lines (split them by role when you touch them): "
          f"{len(long_files)}")
    for f in long_files:
        print(f"  {f}")
    for f in failures:
        print(f"FAIL {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
