"""Generate golden values for label smoothing with TensorFlow/Keras.

Writes tests/golden/label_smoothing.txt: for logits and integer labels
(a classifier's [batch, classes] and a sequence model's [batch, T,
classes]) and smoothing e in {0.1, 0.5, 1.0}, the loss that
keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=e,
reduction="sum") gives on the one-hot labels, divided by a global batch,
and its gradient with respect to the logits. Each value is checked against
a float64 NumPy reference of the same definition (targets one-hot * (1 - e)
+ e / classes); the largest differences are recorded in the comments.

Run from the repository root:
    python3 scripts/golden/label_smoothing.py
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


def reference(logits, labels, e, global_batch):
    """float64 loss and gradient of the smoothed cross-entropy."""
    x = logits.astype(np.float64).reshape(-1, logits.shape[-1])
    y = labels.reshape(-1)
    k = x.shape[1]
    shifted = x - x.max(axis=1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    targets = np.eye(k)[y] * (1 - e) + e / k
    loss = -(targets * log_p).sum() / global_batch
    grad = (np.exp(log_p) - targets) / global_batch
    return loss, grad.reshape(logits.shape)


def main():
    rng = np.random.default_rng(SEED)
    tensors, notes = [], []
    cases = {
        "rows": ((6, 7), 10),        # 6 examples of 7 classes, batch 10.
        "tokens": ((2, 3, 5), 12),   # 2 x 3 tokens of 5 classes, 12 tokens.
    }
    for case, (shape, global_batch) in cases.items():
        logits = (rng.standard_normal(shape) * 3).astype(np.float32)
        labels = rng.integers(0, shape[-1], size=shape[:-1]).astype(np.int64)
        tensors += [(f"{case}/logits", logits), (f"{case}/labels", labels),
                    (f"{case}/global_batch", np.int64(global_batch))]
        for e in (0.1, 0.5, 1.0):
            loss_fn = keras.losses.CategoricalCrossentropy(
                from_logits=True, label_smoothing=e, reduction="sum")
            x = tf.Variable(logits)
            one_hot = tf.one_hot(labels, shape[-1], dtype=tf.float32)
            with tf.GradientTape() as tape:
                loss = loss_fn(one_hot, x) / global_batch
            grad = tape.gradient(loss, x).numpy()
            loss = np.float32(loss.numpy())
            want_loss, want_grad = reference(logits, labels, e, global_batch)
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
        "label_smoothing.txt", tensors,
        "keras.losses.CategoricalCrossentropy(from_logits=True,\n"
        "label_smoothing=e, reduction='sum') of one-hot labels, divided by\n"
        "the global batch, and its gradient (scripts/golden/"
        "label_smoothing.py).\nAgainst a float64 NumPy reference:\n",
        notes)


if __name__ == "__main__":
    main()
