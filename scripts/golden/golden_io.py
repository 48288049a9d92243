"""Shared writer/reader for mirrortrain golden-value files.

Not run directly; imported by the generator scripts in scripts/golden/.

File format (plain text, parsed by the C++ tests):
  * Lines beginning with '#' are comments.
  * Each tensor takes two lines:
        tensor <name> <dtype> <rank> <dim0> <dim1> ...
        <all values, row-major (C) order, separated by single spaces>
    dtype is one of f32, f64, i64. A scalar has rank 0, no dims, and one value.
    f32 values are printed with '%.9g', f64 with '%.17g', i64 with '%d'
    (enough digits to round-trip exactly).
  * Names match [A-Za-z0-9_/.]+ .
"""

import os
import re

import numpy as np

_NAME_RE = re.compile(r"^[A-Za-z0-9_/.]+$")

_DTYPES = {
    np.dtype(np.float32): ("f32", "%.9g"),
    np.dtype(np.float64): ("f64", "%.17g"),
    np.dtype(np.int64): ("i64", "%d"),
}


def _format_value(fmt, v):
    s = fmt % v
    if "nan" in s.lower() or "inf" in s.lower():
        raise ValueError("non-finite value in golden data: %r" % s)
    return s


def write_tensors(path, tensors, comment):
    """Write [(name, np.ndarray), ...] to `path` in the golden format.

    `comment` (str, may be multi-line) is written as '#' lines after a header
    that records the TensorFlow and NumPy versions used.
    """
    try:
        import tensorflow as tf  # noqa: F401  (version only)
        tf_version = tf.__version__
    except ImportError:  # pragma: no cover
        tf_version = "unavailable"

    seen = set()
    lines = []
    lines.append("# mirrortrain golden values -- generated file, do not edit")
    lines.append("# TensorFlow version: %s" % tf_version)
    lines.append("# NumPy version: %s" % np.__version__)
    for c in comment.strip("\n").split("\n"):
        lines.append(("# " + c).rstrip())
    for name, arr in tensors:
        if not _NAME_RE.match(name):
            raise ValueError("bad tensor name %r" % name)
        if name in seen:
            raise ValueError("duplicate tensor name %r" % name)
        seen.add(name)
        arr = np.asarray(arr)
        if arr.dtype not in _DTYPES:
            raise TypeError("tensor %s has unsupported dtype %s" % (name, arr.dtype))
        tag, fmt = _DTYPES[arr.dtype]
        header = ["tensor", name, tag, str(arr.ndim)] + [str(d) for d in arr.shape]
        lines.append(" ".join(header))
        flat = arr.reshape(-1)
        lines.append(" ".join(_format_value(fmt, v) for v in flat.tolist()))
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def read_tensors(path):
    """Parse a golden file back into {name: np.ndarray} (used for self-checks)."""
    out = {}
    types = {"f32": np.float32, "f64": np.float64, "i64": np.int64}
    with open(path) as f:
        lines = [ln.rstrip("\n") for ln in f if not ln.startswith("#")]
    i = 0
    while i < len(lines):
        if not lines[i]:
            i += 1
            continue
        parts = lines[i].split(" ")
        assert parts[0] == "tensor", lines[i]
        name, tag, rank = parts[1], parts[2], int(parts[3])
        shape = tuple(int(d) for d in parts[4:4 + rank])
        assert len(parts) == 4 + rank, lines[i]
        dt = types[tag]
        conv = int if dt is np.int64 else float
        vals = [conv(v) for v in lines[i + 1].split(" ")]
        out[name] = np.array(vals, dtype=dt).reshape(shape)
        i += 2
    return out


def repo_path(*parts):
    """Absolute path under the repository root (scripts/golden/../..)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return os.path.join(root, *parts)


def write_golden(file_name, tensors, comment, notes=(), indent="  "):
    """Writes tests/golden/<file_name> with `comment` followed by the
    cross-check `notes` (one per line, after `indent`), and prints where it
    went and the notes."""
    comment += "\n".join(indent + n for n in notes)
    out = repo_path("tests", "golden", file_name)
    write_tensors(out, tensors, comment)
    print("wrote", out)
    for n in notes:
        print(" ", n)
