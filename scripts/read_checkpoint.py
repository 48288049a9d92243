#!/usr/bin/env python3
"""Read a safetensors checkpoint with numpy only (no `safetensors` package).

    python3 scripts/read_checkpoint.py FILE [--values]

prints every tensor's name, dtype and shape (and with --values, its values),
then the __metadata__. Importable:

    from read_checkpoint import load
    tensors, metadata = load(path)   # {name: np.ndarray}, {str: str}

The reader is strict in the same ways as mirrortrain's C++ reader: the data
must be exactly the tensors, back to back, each spanning dtype size x shape
bytes.
"""

import argparse
import json
import struct
import sys

import numpy as np

# safetensors dtype -> little-endian numpy dtype.
DTYPES = {
    "BOOL": np.dtype("?"),
    "U8": np.dtype("u1"),
    "I8": np.dtype("i1"),
    "I16": np.dtype("<i2"),
    "U16": np.dtype("<u2"),
    "F16": np.dtype("<f2"),
    "I32": np.dtype("<i4"),
    "U32": np.dtype("<u4"),
    "F32": np.dtype("<f4"),
    "I64": np.dtype("<i8"),
    "U64": np.dtype("<u8"),
    "F64": np.dtype("<f8"),
}


class CheckpointError(ValueError):
    pass


def _reject_constant(name):
    raise ValueError("non-standard JSON constant %s" % name)


def load(path):
    """Returns ({name: np.ndarray}, {str: str}) in header order."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise CheckpointError("%s: file is %d bytes, too short" % (path, len(data)))
    (header_len,) = struct.unpack("<Q", data[:8])
    if header_len > len(data) - 8:
        raise CheckpointError(
            "%s: header length %d exceeds the file" % (path, header_len))
    try:
        header = json.loads(data[8:8 + header_len].decode("utf-8"),
                            parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError) as e:
        raise CheckpointError("%s: header is not valid JSON: %s" % (path, e))
    if not isinstance(header, dict):
        raise CheckpointError("%s: header is not a JSON object" % path)
    body = memoryview(data)[8 + header_len:]

    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(
            isinstance(v, str) for v in metadata.values()):
        raise CheckpointError("%s: __metadata__ must map strings to strings" % path)

    tensors = {}
    spans = []
    for name, info in header.items():
        if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
            raise CheckpointError("%s: tensor %r: malformed entry %r" % (path, name, info))
        if info["dtype"] not in DTYPES:
            raise CheckpointError("%s: tensor %r: unsupported dtype %r"
                                  % (path, name, info["dtype"]))
        dtype = DTYPES[info["dtype"]]
        shape, offsets = info["shape"], info["data_offsets"]
        if (not isinstance(shape, list) or not isinstance(offsets, list)
                or len(offsets) != 2
                or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                           for d in shape + offsets)):
            raise CheckpointError("%s: tensor %r: bad shape or offsets" % (path, name))
        begin, end = offsets
        need = dtype.itemsize * int(np.prod(shape, dtype=np.int64))
        if end - begin != need:
            raise CheckpointError("%s: tensor %r: offsets span %d bytes, need %d"
                                  % (path, name, end - begin, need))
        if end > len(body):
            raise CheckpointError("%s: tensor %r runs past the end (truncated?)"
                                  % (path, name))
        spans.append((begin, end, name))
        tensors[name] = np.frombuffer(body[begin:end], dtype=dtype).reshape(shape).copy()
    expected = 0
    for begin, end, name in sorted(spans):
        if begin != expected:
            raise CheckpointError("%s: data of %r is not contiguous with the previous tensor"
                                  % (path, name))
        expected = end
    if expected != len(body):
        raise CheckpointError("%s: %d unused bytes after the data" % (path, len(body) - expected))
    return tensors, dict(metadata)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("file")
    parser.add_argument("--values", action="store_true", help="print the values too")
    args = parser.parse_args()
    try:
        tensors, metadata = load(args.file)
    except (OSError, CheckpointError) as e:
        print(e, file=sys.stderr)
        return 1
    for name, t in tensors.items():
        print("%s\t%s\t%s" % (name, t.dtype.name, list(t.shape)))
        if args.values:
            print("  " + np.array2string(t, threshold=20).replace("\n", "\n  "))
    print("__metadata__:")
    for key in sorted(metadata):
        print("  %s: %s" % (key, metadata[key]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
