#!/usr/bin/env python3
"""safetensors interoperability between mirrortrain and the Python package.

Needs `pip install safetensors numpy`. Run from the repository root.

    python3 scripts/golden/safetensors_interop.py
        writes tests/golden/safetensors_python.safetensors with the
        `safetensors` package (F32, F64, I32, I64 tensors, a scalar, an empty
        tensor and __metadata__); tests/trainer/checkpoint/safetensors_test.cc
        reads it and checks the values listed in its EXPECTED comment, so the
        C++ suite needs no Python.

    python3 scripts/golden/safetensors_interop.py --check FILE
        reads FILE (written by mirrortrain) with the `safetensors` package and
        with the numpy-only scripts/read_checkpoint.py and verifies that both
        agree on names, dtypes, shapes, values (bitwise) and metadata.
"""

import argparse
import os
import sys

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
from read_checkpoint import load  # noqa: E402

GOLDEN = os.path.join(REPO, "tests", "golden", "safetensors_python.safetensors")


def golden_tensors():
    # The C++ test compares these with == (its literals round as numpy's
    # do); -0.0, 1e30 and the integer extremes catch byte-order or width
    # mistakes. Keep the two in sync.
    return {
        "dense/kernel": np.array([[0.5, -1.25, 3.0], [-0.0, 1e30, 2.0 ** -20]],
                                 dtype=np.float32),
        "dense/bias": np.array([0.1, -0.2, 0.3], dtype=np.float64),
        "labels": np.array([[0, -1], [2147483647, -2147483648]], dtype=np.int32),
        "global_step": np.array(1234567890123, dtype=np.int64),
        "offsets": np.array([-(2 ** 63), 2 ** 63 - 1, 7], dtype=np.int64),
        "empty": np.zeros((0, 4), dtype=np.float32),
    }


GOLDEN_METADATA = {"format": "mirrortrain-test", "step": "1234", "note": "quote \" and \u00e9"}


def write_golden():
    tensors = golden_tensors()
    save_file(tensors, GOLDEN, metadata=GOLDEN_METADATA)
    print("wrote %s (%d bytes)" % (GOLDEN, os.path.getsize(GOLDEN)))
    for name, t in tensors.items():
        print("  %-14s %-8s %-8s %s" % (name, t.dtype.name, list(t.shape),
                                        t.ravel().tolist()))
    print("  __metadata__ %s" % GOLDEN_METADATA)


def check(path):
    ours, our_meta = load(path)
    with safe_open(path, framework="numpy") as f:
        theirs = {name: f.get_tensor(name) for name in f.keys()}
        their_meta = f.metadata() or {}
    problems = []
    if sorted(ours) != sorted(theirs):
        problems.append("names differ: %s vs %s" % (sorted(ours), sorted(theirs)))
    if our_meta != their_meta:
        problems.append("metadata differs: %s vs %s" % (our_meta, their_meta))
    for name in sorted(set(ours) & set(theirs)):
        a, b = ours[name], theirs[name]
        if a.dtype != b.dtype or a.shape != b.shape or a.tobytes() != b.tobytes():
            problems.append("%s: %s%s vs %s%s" % (name, a.dtype, a.shape, b.dtype, b.shape))
    print("%s: %d tensors" % (path, len(theirs)))
    for name in theirs:
        t = theirs[name]
        print("  %-16s %-8s %-8s %s" % (name, t.dtype.name, list(t.shape),
                                        np.array2string(t.ravel(), threshold=8)))
    print("  __metadata__ %s" % their_meta)
    if problems:
        for p in problems:
            print("MISMATCH " + p)
        return 1
    print("OK: safetensors %s and read_checkpoint.py agree" %
          __import__("safetensors").__version__)
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", metavar="FILE",
                        help="verify a file written by mirrortrain")
    args = parser.parse_args()
    if args.check:
        return check(args.check)
    write_golden()
    return 0


if __name__ == "__main__":
    sys.exit(main())
