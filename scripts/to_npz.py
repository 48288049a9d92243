#!/usr/bin/env python3
"""Writes the .npz that `data.name: npz` reads: x_train, y_train, x_test, y_test.

From Keras (needs tensorflow; downloads to ~/.keras/datasets on first use):
    scripts/to_npz.py cifar10.npz --keras cifar10
From torchvision (needs torchvision; --download fetches into --root):
    scripts/to_npz.py cifar10.npz --torchvision CIFAR10 --root ~/data --download
From your own arrays (.npy files, anything np.load reads):
    scripts/to_npz.py mine.npz --from-npy x_train.npy y_train.npy x_test.npy y_test.npy

What it writes, and mirrortrain checks: x uint8 (pixels, scaled to [0, 1] when
loaded) or float32 (used as is), shaped [n, features], [n, h, w] or NHWC
[n, h, w, c]; y integer class labels >= 0, shaped [n] (or [n, ...]: one per
token or pixel; with --multi-label,
[n, k] labels of 0 and 1, for loss.name: binary_crossentropy; with
--targets, real-valued regression targets [n] or [n, k], float32, for
a regression loss.name: mean_squared_error, mean_absolute_error, huber or
log_cosh). float64 x becomes
float32; [n, 1] labels become [n]; channels-first image batches from
torchvision are transposed to NHWC. Compressed (np.savez_compressed) unless
--no-compress. TensorFlow and torchvision are imported only for their option.
"""

import argparse
import os
import sys

import numpy as np

KERAS_DATASETS = ("cifar10", "cifar100", "mnist", "fashion_mnist")


def from_keras(name):
    import tensorflow as tf  # noqa: PLC0415 (only for this option)

    module = getattr(tf.keras.datasets, name)
    (x_train, y_train), (x_test, y_test) = module.load_data()
    return x_train, y_train, x_test, y_test


def _torchvision_split(ds):
    # Most image datasets keep the whole split as arrays (`data` and
    # `targets`, or SVHN's `labels`); the rest are read example by example.
    labels = getattr(ds, "targets", getattr(ds, "labels", None))
    data = getattr(ds, "data", None)
    if data is not None and labels is not None:
        x = data.numpy() if hasattr(data, "numpy") else np.asarray(data)
        y = labels.numpy() if hasattr(labels, "numpy") else np.asarray(labels)
        return x, y
    xs, ys = [], []
    for image, label in ds:
        xs.append(np.asarray(image))
        ys.append(int(label))
    return np.stack(xs), np.asarray(ys)


def from_torchvision(name, root, download):
    import torchvision  # noqa: PLC0415 (only for this option)

    cls = getattr(torchvision.datasets, name)
    out = []
    for train in (True, False):
        try:
            ds = cls(root, train=train, download=download)
        except TypeError:  # SVHN and others take split= instead of train=.
            ds = cls(root, split="train" if train else "test",
                     download=download)
        out.extend(_torchvision_split(ds))
    return tuple(out)


def from_npy(paths):
    return tuple(np.load(p, allow_pickle=False) for p in paths)


def checked(name, x, y, multi_label=False, targets=False):
    """The arrays as mirrortrain reads them, or SystemExit saying why not."""
    x, y = np.asarray(x), np.asarray(y)
    if x.dtype == np.float64:
        x = x.astype(np.float32)
    if x.dtype not in (np.uint8, np.float32):
        sys.exit(f"x_{name}: dtype {x.dtype} is neither uint8 nor float32 "
                 "(convert it first)")
    if not 2 <= x.ndim <= 4:
        sys.exit(f"x_{name}: shape {x.shape} is not [n, features], "
                 "[n, h, w] or [n, h, w, c]")
    # Channels-first image batches (torchvision's SVHN) become NHWC.
    if x.ndim == 4 and x.shape[1] in (1, 3) and x.shape[3] not in (1, 3):
        x = x.transpose(0, 2, 3, 1)
    if y.ndim == 2 and y.shape[1] == 1 and not multi_label:
        y = y.reshape(-1)
    if targets:
        if y.ndim not in (1, 2) or not (np.issubdtype(y.dtype, np.floating)
                                        or np.issubdtype(y.dtype, np.integer)):
            sys.exit(f"y_{name}: expected real-valued targets [n] or [n, k] "
                     f"(--targets), got {y.dtype} {y.shape}")
        y = y.astype(np.float32)
        if not np.isfinite(y).all():
            sys.exit(f"y_{name}: holds NaN or infinity (as float32)")
    elif multi_label:
        if y.ndim != 2 or not np.issubdtype(y.dtype, np.integer):
            sys.exit(f"y_{name}: expected integer labels [n, k] "
                     f"(--multi-label), got {y.dtype} {y.shape}")
        if y.size and (y.min() < 0 or y.max() > 1):
            sys.exit(f"y_{name}: multi-label labels are 0 or 1, found "
                     f"{y.min()}..{y.max()}")
    elif y.ndim < 1 or not np.issubdtype(y.dtype, np.integer):
        sys.exit(f"y_{name}: expected integer class labels [n] (or [n, ...]: "
                 f"one per token or pixel), got {y.dtype} {y.shape} "
                 "(regression targets: --targets)")
    elif (y.ndim == 2 and y.shape[1] > 1 and y.size and y.min() >= 0 and
          y.max() <= 1 and (y.sum(axis=1) == 1).all()):
        sys.exit(f"y_{name}: rows of one 1 among 0s look one-hot: class "
                 "labels are y.argmax(1); multi-label 0/1 labels: "
                 "--multi-label")
    if len(y) != len(x):
        sys.exit(f"y_{name} has {len(y)} labels but x_{name} has {len(x)} "
                 "examples")
    if not targets and len(y) and y.min() < 0:
        sys.exit(f"y_{name}: negative label {y.min()}")
    if x.dtype == np.float32 and not np.isfinite(x).all():
        sys.exit(f"x_{name}: holds NaN or infinity")
    # Little-endian, C order: what the reader accepts.
    x = np.ascontiguousarray(x, dtype=x.dtype.newbyteorder("<"))
    y = np.ascontiguousarray(y, dtype=y.dtype.newbyteorder("<"))
    return x, y


def write_npz(path, x_train, y_train, x_test, y_test, compress=True,
              multi_label=False, targets=False):
    """Checks the arrays and writes them atomically to `path`."""
    x_train, y_train = checked("train", x_train, y_train, multi_label, targets)
    x_test, y_test = checked("test", x_test, y_test, multi_label, targets)
    if y_train.shape[1:] != y_test.shape[1:]:
        sys.exit(f"y_train has {y_train.shape[1:]} labels per example but "
                 f"y_test has {y_test.shape[1:]}")
    if x_train.shape[1:] != x_test.shape[1:]:
        sys.exit(f"x_train examples are {x_train.shape[1:]} but x_test's "
                 f"are {x_test.shape[1:]}")
    save = np.savez_compressed if compress else np.savez
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:  # A file object: savez keeps the name as is.
        save(f, x_train=x_train, y_train=y_train, x_test=x_test,
             y_test=y_test)
    os.replace(tmp, path)
    if targets:
        per = y_train.shape[1] if y_train.ndim == 2 else 1
        what = f"{per} float32 target{'s' if per > 1 else ''} per example"
    else:
        classes = int(max(y_train.max(initial=0), y_test.max(initial=0))) + 1
        what = f"{classes} classes"
    print(f"{path}: x_train {x_train.dtype} {x_train.shape}, x_test "
          f"{x_test.shape}, {what}")


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("out", help="the .npz to write")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--keras", choices=KERAS_DATASETS,
                        help="a tf.keras.datasets dataset")
    source.add_argument("--torchvision", metavar="NAME",
                        help="a torchvision.datasets class (CIFAR10, MNIST, "
                        "FashionMNIST, SVHN, ...)")
    source.add_argument("--from-npy", nargs=4,
                        metavar=("X_TRAIN", "Y_TRAIN", "X_TEST", "Y_TEST"),
                        help="four arrays saved with np.save")
    parser.add_argument("--root", help="torchvision's dataset folder")
    parser.add_argument("--download", action="store_true",
                        help="let torchvision download into --root")
    parser.add_argument("--no-compress", action="store_true",
                        help="np.savez instead of np.savez_compressed")
    labels = parser.add_mutually_exclusive_group()
    labels.add_argument("--multi-label", action="store_true",
                        help="y is [n, k] labels of 0 and 1 "
                        "(loss.name: binary_crossentropy)")
    labels.add_argument("--targets", action="store_true",
                        help="y is real-valued regression targets [n] or "
                        "[n, k], written as float32 (a regression "
                        "loss.name: mean_squared_error, mean_absolute_error, "
                        "huber or log_cosh)")
    args = parser.parse_args()
    if args.torchvision and not args.root:
        parser.error("--torchvision needs --root")
    if args.keras:
        arrays = from_keras(args.keras)
    elif args.torchvision:
        arrays = from_torchvision(args.torchvision, args.root, args.download)
    else:
        arrays = from_npy(args.from_npy)
    write_npz(args.out, *arrays, compress=not args.no_compress,
              multi_label=args.multi_label, targets=args.targets)


if __name__ == "__main__":
    main()
