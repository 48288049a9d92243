#!/usr/bin/env python3
"""Checks a run directory's TensorBoard event files with the real tensorboard.

Usage:
    scripts/check_tensorboard.py RUN_DIR [--expect TAG ...]

RUN_DIR is a run directory holding events.out.tfevents.* files (or one event
file). Each file is first walked record by record, checking the TFRecord
framing and both masked CRC-32Cs and parsing every record as an Event,
because TensorBoard's loader silently stops at a corrupt record. The scalars
are then loaded with TensorBoard's own EventAccumulator and each tag is
printed with its number of points and its last (step, value):

    train/loss  points=6  last=(500, 0.383333)

Exit status: 0 when every file reads cleanly and every --expect tag is
present; 1 otherwise (no event file, corrupt file, missing tag, tensorboard
not installed); 2 for bad usage. A truncated final record (a writer still
running) is only warned about.

Needs `pip install tensorboard`.
"""

import argparse
import os
import struct
import sys

# TensorFlow, when installed, is what TensorBoard reads with; keep its C++
# start-up chatter off the output.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def fail(message):
    print(f"check_tensorboard: {message}", file=sys.stderr)
    sys.exit(1)


def event_files(run_dir):
    if os.path.isfile(run_dir):
        return [run_dir]
    if not os.path.isdir(run_dir):
        fail(f"{run_dir}: no such directory")
    return sorted(
        os.path.join(run_dir, name)
        for name in os.listdir(run_dir)
        if "tfevents" in name and os.path.isfile(os.path.join(run_dir, name))
    )


def check_framing(path, masked_crc32c, event_pb2):
    """Returns the number of records; fails on any corrupt record."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        fail(f"{path}: {e}")
    offset = 0
    records = 0
    while offset < len(data):
        if len(data) - offset < 12:
            print(f"warning: {path}: truncated record header at byte {offset}",
                  file=sys.stderr)
            break
        header = data[offset:offset + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[offset + 8:offset + 12])
        if masked_crc32c(header) != length_crc:
            fail(f"{path}: bad length CRC in record {records} at byte {offset}")
        start = offset + 12
        if len(data) - start < length + 4:
            print(f"warning: {path}: truncated record {records} at byte "
                  f"{offset}", file=sys.stderr)
            break
        payload = data[start:start + length]
        (data_crc,) = struct.unpack("<I", data[start + length:start + length + 4])
        if masked_crc32c(payload) != data_crc:
            fail(f"{path}: bad data CRC in record {records} at byte {offset}")
        try:
            event = event_pb2.Event.FromString(payload)
        except Exception as e:  # protobuf's DecodeError varies by backend.
            fail(f"{path}: record {records} is not an Event: {e}")
        if records == 0 and not event.file_version.startswith("brain.Event:"):
            fail(f"{path}: first record has no file_version "
                 f"(got {event.file_version!r})")
        records += 1
        offset = start + length + 4
    if records == 0:
        fail(f"{path}: no records")
    return records


def main():
    parser = argparse.ArgumentParser(
        description="Check a run's TensorBoard event files.")
    parser.add_argument("run_dir", metavar="RUN_DIR")
    parser.add_argument("--expect", metavar="TAG", nargs="+", default=[],
                        action="extend", help="scalar tags that must exist")
    args = parser.parse_args()

    try:
        from tensorboard.backend.event_processing.event_accumulator import (
            SCALARS, EventAccumulator)
        from tensorboard.compat.proto import event_pb2
        from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import (
            masked_crc32c)
        import tensorboard
    except ImportError as e:
        fail(f"cannot import tensorboard ({e}); pip install tensorboard")

    files = event_files(args.run_dir)
    if not files:
        fail(f"{args.run_dir}: no events.out.tfevents.* file")
    for path in files:
        records = check_framing(path, masked_crc32c, event_pb2)
        print(f"{path}: {records} records")

    # size_guidance 0 keeps every point instead of a reservoir sample.
    accumulator = EventAccumulator(args.run_dir, size_guidance={SCALARS: 0})
    try:
        accumulator.Reload()
    except Exception as e:
        fail(f"{args.run_dir}: tensorboard {tensorboard.__version__} "
             f"cannot load it: {e}")
    tags = accumulator.Tags().get("scalars", [])
    for tag in tags:
        points = accumulator.Scalars(tag)
        last = points[-1]
        print(f"{tag}  points={len(points)}  last=({last.step}, {last.value:g})")

    missing = [tag for tag in args.expect if tag not in tags]
    if missing:
        fail(f"{args.run_dir}: missing scalar tags: {', '.join(missing)}")


if __name__ == "__main__":
    main()
