#!/usr/bin/env python3
"""The structure checks `./dev test` runs over every crate (crates/*/): its import graph has
no circle and no arrow up its layers (graph.py), no function is over 120 lines
(long_functions.py), and no Rust file (src/ or tests/) is over 800 lines. Files over 600
lines (the style guide's bound) are listed, to be split by role.

    python3 tools/imports/check.py [--crates crates]

Exit status 1 when a check fails, naming the files.
"""
import argparse
import glob
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from graph import Crate, circles, layers_of, strip_comments_and_strings, upward  # noqa: E402
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--crates", default=os.path.join(here, "../../crates"))
    args = ap.parse_args()
    failures, long_files = [], []
    for crate_dir in sorted(glob.glob(os.path.join(args.crates, "*", ""))):
        src = os.path.join(crate_dir, "src")
        name = os.path.basename(os.path.normpath(crate_dir))
        if not os.path.isdir(src):
            continue
        edges = Crate(src).edges()
        comps = circles(edges)
        up = upward(edges, layers_of(src))
        too_long = []
        for path in rust_files(crate_dir):
            rel = os.path.relpath(path, args.crates)
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
        print(f"{name}: {len(edges)} files, {len(comps)} circles, {len(up)} upward arrows, "
              f"{len(too_long)} functions over {TOO_LONG} lines")
        failures += [f"{name}: circle: {', '.join(c)}" for c in comps]
        failures += [f"{name}: upward arrow: {a} -> {b}" for a, b in up]
        failures += [f"{f} (at most {TOO_LONG}: split it)" for f in too_long]
    print(f"files over {FILE_LONG} lines (split them by role when you touch them): "
          f"{len(long_files)}")
    for f in long_files:
        print(f"  {f}")
    for f in failures:
        print(f"FAIL {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
