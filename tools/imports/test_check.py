#!/usr/bin/env python3
"""check.py against small crates written for it: it passes a clean one and fails, naming
the file, on each breach it exists for: a file over 800 lines, a function over 120 lines,
an import circle, an arrow up the layers, a crate without a layer order, a circle among a
test binary's modules, and a long file in a crate outside crates/ (fuzz/).

    python3 tools/imports/test_check.py

Exit status 1 when check.py does not fail (or fails) where it should.
"""
import os
import subprocess
import sys
import tempfile

CHECK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "check.py")

# A clean library crate named as one check.py knows the layers of (gpu below ops).
CLEAN = {
    "src/lib.rs": "pub mod gpu;\npub mod ops;\n",
    "src/gpu.rs": "pub fn device() {}\n",
    "src/ops.rs": "use crate::gpu::device;\npub fn run() {\n    device();\n}\n",
    "tests/integration/main.rs": "mod common;\nmod golden;\n",
    "tests/integration/common.rs": "pub fn fixture() {}\n",
    "tests/integration/golden.rs": "use crate::common::fixture;\n#[test]\nfn t() {\n    fixture();\n}\n",
}


def long_function(lines):
    return "pub fn long() {\n" + "    let _x = 1;\n" * lines + "}\n"


# Each breach: (files changed or added on top of CLEAN, crate name, text the failure names).
BREACHES = {
    "file over 800 lines": ({"src/gpu.rs": "pub fn device() {}\n" + "// x\n" * 800},
                            "wgemma", "src/gpu.rs: 801 lines"),
    "function over 120 lines": ({"src/gpu.rs": "pub fn device() {}\n" + long_function(120)},
                                "wgemma", "src/gpu.rs:2 long: 122 lines"),
    "import circle": ({"src/gpu.rs": "use crate::ops::run;\npub fn device() {\n    run();\n}\n",
                       "src/ops.rs": "use crate::gpu::device;\npub fn run() {\n    device();\n}\n"},
                      "wgemma", "circle: gpu.rs, ops.rs"),
    "upward arrow": ({"src/gpu.rs": "use crate::ops::run;\npub fn device() {\n    run();\n}\n",
                      "src/ops.rs": "pub fn run() {}\n"},
                     "wgemma", "upward arrow: gpu.rs -> ops.rs"),
    "crate without a layer order": ({}, "unlisted", "unlisted: no layer order"),
    "circle in a test binary": ({"tests/integration/common.rs":
                                 "use crate::golden::helper;\npub fn fixture() {\n    helper();\n}\n",
                                 "tests/integration/golden.rs":
                                 "use crate::common::fixture;\npub fn helper() {\n    fixture();\n}\n"},
                                "wgemma", "tests/integration: circle: common.rs, golden.rs"),
}


def write(root, files):
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)


def run_check(crates, extra):
    out = subprocess.run([sys.executable, CHECK, "--crates", crates, "--extra", *extra],
                         capture_output=True, text=True)
    return out.returncode, out.stdout + out.stderr


def main():
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        crates = os.path.join(tmp, "crates")
        write(os.path.join(crates, "wgemma"), CLEAN)
        code, out = run_check(crates, [])
        if code != 0:
            problems.append(f"a clean crate fails:\n{out}")
    for what, (files, name, expected) in BREACHES.items():
        with tempfile.TemporaryDirectory() as tmp:
            crates = os.path.join(tmp, "crates")
            write(os.path.join(crates, name), {**CLEAN, **files})
            code, out = run_check(crates, [])
            if code != 1 or expected not in out:
                problems.append(f"{what}: expected exit 1 naming {expected!r}, got {code}:\n{out}")
    with tempfile.TemporaryDirectory() as tmp:
        crates, fuzz = os.path.join(tmp, "crates"), os.path.join(tmp, "fuzz")
        write(os.path.join(crates, "wgemma"), CLEAN)
        write(fuzz, {"targets.rs": "// x\n" * 801})
        code, out = run_check(crates, [fuzz])
        if code != 1 or "fuzz/targets.rs: 801 lines" not in out:
            problems.append(f"long file in fuzz/: expected exit 1, got {code}:\n{out}")
    for p in problems:
        print(f"FAIL {p}")
    print(f"check.py: {len(BREACHES) + 2 - len(problems)} of {len(BREACHES) + 2} cases as expected")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
