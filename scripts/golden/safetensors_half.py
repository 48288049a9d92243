#!/usr/bin/env python3
"""Half-precision safetensors, as PyTorch and Hugging Face write them.

Needs `pip install numpy safetensors ml_dtypes`. Run from the repository
root:

    python3 scripts/golden/safetensors_half.py

writes tests/golden/safetensors_half.safetensors with the `safetensors`
package: an F16 tensor and a BF16 tensor (numpy float16, ml_dtypes bfloat16)
holding ones, signed zeros, the largest and smallest (subnormal) values,
infinities and NaN with a payload, and metadata {"format": "pt"} as PyTorch's
`save_file` writes. Beside it, tests/golden/safetensors_half.txt lists each
tensor's values widened to float32 by numpy (`astype(np.float32)`), as hex
bit patterns, which tests/trainer/checkpoint/safetensors_test.cc compares
with what mirrortrain reads.
"""

import os

import ml_dtypes
import numpy as np
from safetensors.numpy import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(os.path.dirname(os.path.dirname(HERE)), "tests", "golden")

# Bit patterns, so that the special values are exactly these.
F16_BITS = [0x3C00, 0xC000, 0x7BFF, 0x0001, 0x03FF, 0x0400, 0x8000, 0x7C00,
            0xFC00, 0x3555, 0x7E01, 0x0000]
BF16_BITS = [0x3F80, 0xC000, 0x7F7F, 0x0001, 0x8000, 0x7F80, 0xFF80, 0x3EAB,
             0x7FC1, 0x4049]


def main():
    tensors = {
        "dense/kernel": np.array(F16_BITS, dtype=np.uint16)
        .view(np.float16).reshape(3, 4),
        "dense/bias": np.array(BF16_BITS, dtype=np.uint16)
        .view(ml_dtypes.bfloat16),
    }
    path = os.path.join(GOLDEN, "safetensors_half.safetensors")
    save_file(tensors, path, metadata={"format": "pt"})
    lines = ["# name: float32 bits of each value, widened by numpy "
             "(scripts/golden/safetensors_half.py)"]
    for name, t in tensors.items():
        wide = t.astype(np.float32).ravel().view(np.uint32)
        lines.append("%s: %s" % (name, " ".join("%08x" % b for b in wide)))
    with open(os.path.join(GOLDEN, "safetensors_half.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote %s and safetensors_half.txt" % path)


if __name__ == "__main__":
    main()
