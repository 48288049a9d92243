#!/usr/bin/env python3
"""Small .npz files written by numpy through scripts/to_npz.py, for
tests/trainer/data/npz_test.cc. Run from the repository root (needs numpy):

    python3 scripts/golden/npz_fixtures.py

It writes tests/golden/npz_stored.npz (np.savez: ZIP_STORED members, with
the ZIP64 extra fields numpy's force_zip64 adds) and
tests/golden/npz_deflated.npz (np.savez_compressed: deflate). Both hold the
same arrays, defined by formulas the C++ test recomputes (keep the two in
sync):

    x_train  uint8   (3, 2, 4, 3)  flat element i = (37 * i + 5) % 256
    y_train  int64   (3,)          [2, 0, 1]
    x_test   float32 (2, 2, 4, 3)  flat element i = (i - 7) / 8
    y_test   uint8   (2,)          [4, 3]          (so 5 classes)
"""

import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
from to_npz import write_npz  # noqa: E402


def arrays():
    x_train = ((37 * np.arange(72) + 5) % 256).astype(np.uint8)
    x_test = ((np.arange(48) - 7) / 8).astype(np.float32)
    return (x_train.reshape(3, 2, 4, 3), np.array([2, 0, 1], np.int64),
            x_test.reshape(2, 2, 4, 3), np.array([4, 3], np.uint8))


def main():
    golden = os.path.join(REPO, "tests", "golden")
    write_npz(os.path.join(golden, "npz_stored.npz"), *arrays(),
              compress=False)
    write_npz(os.path.join(golden, "npz_deflated.npz"), *arrays(),
              compress=True)


if __name__ == "__main__":
    main()
