"""Generate golden values for binary_crossentropy with TensorFlow/Keras.

Writes tests/golden/binary_crossentropy.txt: for logits and 0/1 labels
(binary classification: logits [batch, 1] and labels [batch]; multi-label:
logits and labels [batch, k]) and smoothing e in {0, 0.1, 1.0}, the loss
keras.losses.BinaryCrossentropy(from_logits=True, label_smoothing=e,
reduction="sum") gives (each example's mean over its k labels, summed over
the batch), its gradient with respect to the logits, and
keras.metrics.binary_accuracy of the probabilities (the mean over every
label). The logits include large ones (|x| up to 100, where the loss is
e^-|x| or |x|) and an exact 0. Each value is checked against a float64
NumPy reference of the same definition; the largest differences are
recorded in the comments.

Run from the repository root:
    python3 scripts/golden/binary_crossentropy.py
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_io import write_golden  # noqa: E402

SEED = 20261129


def reference(logits, labels, e):
    """float64 loss (summed per-example means) and gradient."""
    x = logits.astype(np.float64).reshape(labels.shape[0], -1)
    y = labels.reshape(x.shape).astype(np.float64) * (1 - e) + e / 2
    k = x.shape[1]
    per_label = np.logaddexp(0, x) - x * y
    loss = per_label.sum() / k
    grad = (1 / (1 + np.exp(-x)) - y) / k
    return loss, grad.reshape(logits.shape)


def main():
    rng = np.random.default_rng(SEED)
    tensors, notes = [], []
    extremes = np.array([0.0, 30.0, -30.0, 100.0, -100.0, 17.0, -17.0],
                        np.float32)
    cases = {"binary": (9,), "multi": (5, 3)}
    for case, label_shape in cases.items():
        labels = rng.integers(0, 2, size=label_shape).astype(np.int64)
        logit_shape = label_shape + (1,) if len(label_shape) == 1 else label_shape
        logits = (rng.standard_normal(logit_shape) * 3).astype(np.float32)
        flat = logits.reshape(-1)
        flat[:len(extremes)] = extremes  # Both labels meet large logits.
        tensors += [(f"{case}/logits", logits), (f"{case}/labels", labels)]
        y = labels.reshape(logits.shape).astype(np.float32)
        probabilities = tf.sigmoid(logits)
        accuracy = np.float32(
            keras.metrics.binary_accuracy(y, probabilities).numpy().mean())
        tensors.append((f"{case}/accuracy", accuracy))
        for e in (0.0, 0.1, 1.0):
            loss_fn = keras.losses.BinaryCrossentropy(
                from_logits=True, label_smoothing=e, reduction="sum")
            x = tf.Variable(logits)
            with tf.GradientTape() as tape:
                loss = loss_fn(y, x)
            grad = tape.gradient(loss, x).numpy()
            loss = np.float32(loss.numpy())
            want_loss, want_grad = reference(logits, labels, e)
            d_loss = abs(float(loss) - want_loss)
            d_grad = float(np.abs(grad - want_grad).max())
            assert d_loss < 1e-5 * max(1.0, abs(want_loss)), (case, e, d_loss)
            assert d_grad < 1e-6, (case, e, d_grad)
            notes.append(f"{case} e={e}: |loss - ref| {d_loss:.2e}, "
                         f"max |grad - ref| {d_grad:.2e}")
            tag = f"{case}/e{int(round(e * 10)):02d}"
            tensors += [(f"{tag}/label_smoothing", np.float64(e)),
                        (f"{tag}/loss", loss), (f"{tag}/grad", grad)]
    write_golden(
        "binary_crossentropy.txt", tensors,
        "keras.losses.BinaryCrossentropy(from_logits=True,\n"
        "label_smoothing=e, reduction='sum') of 0/1 labels (per-example\n"
        "means summed), its gradient, and keras.metrics.binary_accuracy\n"
        "of the sigmoid probabilities (scripts/golden/"
        "binary_crossentropy.py).\nAgainst a float64 NumPy reference:\n",
        notes)


if __name__ == "__main__":
    main()
