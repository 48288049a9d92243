"""Generate golden values for the huber and log_cosh losses with Keras.

Writes tests/golden/regression_losses.txt: for outputs [8, 2] against
real-valued targets [8, 2] (float32), keras.losses.Huber(delta,
reduction="sum") for delta in {1.0, 0.5, 2.5} and keras.losses.LogCosh(
reduction="sum"): each example's mean over its 2 targets, summed over the
batch, and the gradient with respect to the outputs. The differences
output - target include an exact 0, +-delta exactly for each delta (where
Keras takes the quadratic branch), values 2^-10 inside and outside each
delta, and +-100 (where cosh overflows float32). Each value is checked against a
float64 NumPy reference of the same definition; the largest differences are
recorded in the comments.

Run from the repository root:
    python3 scripts/golden/regression_losses.py
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_io import write_golden  # noqa: E402

SEED = 20261130
DELTAS = (1.0, 0.5, 2.5)


def huber_reference(d, delta):
    a = np.abs(d)
    loss = np.where(a <= delta, 0.5 * d * d, delta * a - 0.5 * delta**2)
    grad = np.where(a <= delta, d, delta * np.sign(d))
    return loss, grad


def log_cosh_reference(d):
    a = np.abs(d)
    # log cosh d = |d| + log1p(e^-2|d|) - log 2, without overflow.
    loss = a + np.log1p(np.exp(-2 * a)) - np.log(2.0)
    return loss, np.tanh(d)


def main():
    rng = np.random.default_rng(SEED)
    # On a grid of 2^-10, so that every difference is exact in float32
    # (the deltas' edges are met exactly).
    def grid(v):
        return np.round(v * 1024) / 1024

    targets = grid(rng.standard_normal((8, 2)) * 2).astype(np.float32)
    d = grid(rng.standard_normal((8, 2)) * 1.5)
    e = 2.0**-10
    d.reshape(-1)[:15] = [0.0, 1.0, -1.0, 0.5, -0.5, 2.5, -2.5, 1 - e, 1 + e,
                          -(0.5 - e), -(0.5 + e), 2.5 - e, 2.5 + e, 100.0,
                          -100.0]
    with np.errstate(over="ignore"):
        assert not np.isfinite(np.cosh(np.float32(100.0)))
    outputs = (targets + d).astype(np.float32)
    assert np.array_equal(outputs.astype(np.float64) - targets, d)
    tensors = [("outputs", outputs), ("targets", targets)]
    notes = []
    cases = [(f"huber{int(delta * 10):02d}", delta,
              keras.losses.Huber(delta=delta, reduction="sum"),
              lambda d, delta=delta: huber_reference(d, delta))
             for delta in DELTAS]
    cases.append(("log_cosh", 0.0, keras.losses.LogCosh(reduction="sum"),
                  log_cosh_reference))
    for tag, delta, loss_fn, reference in cases:
        x = tf.Variable(outputs)
        with tf.GradientTape() as tape:
            loss = loss_fn(targets, x)
        grad = tape.gradient(loss, x).numpy()
        loss = np.float32(loss.numpy())
        per_target, per_grad = reference(d)
        k = d.shape[1]
        want_loss, want_grad = per_target.sum() / k, per_grad / k
        d_loss = abs(float(loss) - want_loss)
        d_grad = float(np.abs(grad - want_grad).max())
        assert d_loss < 1e-5 * max(1.0, abs(want_loss)), (tag, d_loss)
        assert d_grad < 1e-6, (tag, d_grad)
        notes.append(f"{tag}: |loss - ref| {d_loss:.2e}, "
                     f"max |grad - ref| {d_grad:.2e}")
        tensors += [(f"{tag}/delta", np.float64(delta)),
                    (f"{tag}/loss", loss), (f"{tag}/grad", grad)]
    write_golden(
        "regression_losses.txt", tensors,
        "keras.losses.Huber(delta, reduction='sum') and\n"
        "keras.losses.LogCosh(reduction='sum') of outputs against targets\n"
        "[6, 2] (per-example means summed) and their gradients\n"
        "(scripts/golden/regression_losses.py; <case>/delta is 0 for\n"
        "log_cosh). Against a float64 NumPy reference:\n",
        notes)


if __name__ == "__main__":
    main()
