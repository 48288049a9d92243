"""Keras's recurrent layers under dropout and recurrent_dropout, with
mirrortrain's masks.

Keras's random stream cannot be matched, so the masks are mirrortrain's
(its counter-based draws, ported below from tensor/dropout_mask.h and
models/recurrent_layers.cc: DropoutMix, DropoutStepSeed, DropoutKeep, the
recurrent layers' salts) and given to Keras's cells in place of their own
(_create_dropout_mask): what is compared is where Keras applies each mask
(per gate under recurrent_dropout, Keras's implementation 1; one input mask
otherwise), and the values and gradients that follow.

Writes tests/golden/recurrent_dropout.txt; per case <case>/:
  * x [B, T, F], up [B, T, U] (the upstream gradient of the outputs);
  * <variable>: the layer's initial variables (Keras's initializers);
  * y: the outputs, training=True, at step seed STEP_SEED;
  * grad_x, grad/<variable>: the gradients of sum(y * up).
tests/models/recurrent_dropout_test.cc reads it.

Run from the repository root:
    python3 scripts/golden/recurrent_dropout.py
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_io import write_golden  # noqa: E402

SEED = 4242
STEP_SEED = 17
B, T, F = 5, 6, 3
DROPOUT, RECURRENT_DROPOUT = 0.3, 0.4
M64 = (1 << 64) - 1
# models/recurrent_layers.cc: kRecurrentDropoutSalt.
RECURRENT_SALT = 0x726e6e64726f7030


def mix(z):
    """tensor/dropout_mask.h: DropoutMix."""
    z = (z + 0x9e3779b97f4a7c15) & M64
    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & M64
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M64
    return z ^ (z >> 31)


def mask(gates, recurrent, gate, rate, width, stream=0):
    """The layer's mask [B, width] for `gate` (ForwardContext::Dropout of
    ones: DropoutStepSeed, then DropoutKeep per element, rows from 0)."""
    salt = mix(RECURRENT_SALT ^ (gates << 8) ^ (0x80 if recurrent else 0) ^
               gate)
    seed = ((STEP_SEED * 0x9e3779b97f4a7c15 + stream) & M64) ^ salt
    per_call = mix(seed)
    scale = np.float32(1.0 / (1.0 - rate))
    out = np.zeros(B * width, dtype=np.float32)
    for i in range(B * width):
        u = (mix(per_call ^ i) >> 11) * 2.0 ** -53
        out[i] = scale if u >= rate else 0.0
    return out.reshape(B, width)


def case(rng, name, layer, gates, units, recurrent_dropout):
    """`layer` (a Keras recurrent layer of `units`, `gates` gates) on
    random x, its cell handed mirrortrain's masks."""
    x = rng.normal(size=(B, T, F)).astype(np.float32)
    up = rng.normal(size=(B, T, units)).astype(np.float32)
    keras.backend.clear_session()
    keras.utils.set_random_seed(SEED)
    model = keras.Sequential([keras.Input((T, F)), layer])
    per_gate = recurrent_dropout > 0
    count = gates if per_gate else 1

    def masks(recurrent, rate, width):
        drawn = [tf.constant(mask(gates, recurrent, g, rate, width))
                 for g in range(count)]
        # Keras's cells take a list of masks with dropout_mask_count.
        return drawn if getattr(layer.cell, "dropout_mask_count",
                                None) else drawn[0]

    asked = set()

    def create(step_input, rate):
        asked.add(rate)
        if rate == DROPOUT:
            return masks(False, DROPOUT, F)
        assert rate == RECURRENT_DROPOUT, rate
        return masks(True, RECURRENT_DROPOUT, units)

    layer.cell._create_dropout_mask = create
    own = model.name + "/"
    named = [(v.path[len(own):] if v.path.startswith(own) else v.path, v)
             for v in model.weights]
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        y = model(xt, training=True)
        loss = tf.reduce_sum(y * up)
    grads = tape.gradient(loss, [xt] + [v for _, v in named])
    # Keras drew every mask through the patched cell.
    assert asked == ({DROPOUT, RECURRENT_DROPOUT} if per_gate else {DROPOUT}), (
        asked)
    out = [(name + "/x", x), (name + "/up", up),
           (name + "/y", y.numpy().astype(np.float32)),
           (name + "/grad_x", grads[0].numpy().astype(np.float32))]
    for (vname, v), g in zip(named, grads[1:]):
        out.append((name + "/" + vname, v.numpy().astype(np.float32)))
        out.append((name + "/grad/" + vname,
                    tf.convert_to_tensor(g).numpy().astype(np.float32)))
    return out


def main():
    rng = np.random.default_rng(SEED)
    L = keras.layers
    tensors = []
    tensors += case(rng, "lstm_input", L.LSTM(4, return_sequences=True,
                                              dropout=DROPOUT), 4, 4, 0)
    tensors += case(rng, "lstm_both", L.LSTM(
        4, return_sequences=True, dropout=DROPOUT,
        recurrent_dropout=RECURRENT_DROPOUT), 4, 4, RECURRENT_DROPOUT)
    tensors += case(rng, "lstm_backwards", L.LSTM(
        4, return_sequences=True, go_backwards=True, dropout=DROPOUT,
        recurrent_dropout=RECURRENT_DROPOUT), 4, 4, RECURRENT_DROPOUT)
    tensors += case(rng, "gru_both", L.GRU(
        4, return_sequences=True, dropout=DROPOUT,
        recurrent_dropout=RECURRENT_DROPOUT), 3, 4, RECURRENT_DROPOUT)
    tensors += case(rng, "gru_before", L.GRU(
        4, return_sequences=True, reset_after=False, dropout=DROPOUT,
        recurrent_dropout=RECURRENT_DROPOUT), 3, 4, RECURRENT_DROPOUT)
    tensors += case(rng, "gru_input", L.GRU(4, return_sequences=True,
                                            dropout=DROPOUT), 3, 4, 0)
    tensors += case(rng, "srnn_both", L.SimpleRNN(
        4, return_sequences=True, dropout=DROPOUT,
        recurrent_dropout=RECURRENT_DROPOUT), 1, 4, RECURRENT_DROPOUT)
    comment = """\
Generated by scripts/golden/recurrent_dropout.py with Keras %s (seed %d).
Keras's LSTM, GRU and SimpleRNN (4 units, return_sequences, dropout %g,
recurrent_dropout %g where named both, before: reset_after=False,
backwards: go_backwards) on x [%d, %d, %d], training=True, their cells
given mirrortrain's masks of step seed %d (stream 0, rows from 0); y, and
the gradients of sum(y * up) in x and every variable.""" % (
        keras.__version__, SEED, DROPOUT, RECURRENT_DROPOUT, B, T, F,
        STEP_SEED)
    write_golden("recurrent_dropout.txt", tensors, comment)


if __name__ == "__main__":
    main()
