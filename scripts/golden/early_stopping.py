"""Generate golden values for early stopping with Keras's own callback.

Writes tests/golden/early_stopping.txt: for sequences of monitored values
(losses to minimise, accuracies to maximise) and several patience and
min_delta settings, the evaluation after which
keras.callbacks.EarlyStopping stops training (-1: it never does), with the
best value's evaluation. Values are multiples of 1/8 and min_delta of 1/4,
so float32 (Keras compares with keras.ops) and float64 (mirrortrain) agree.

Run from the repository root:
    python3 scripts/golden/early_stopping.py
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_io import write_golden  # noqa: E402

SEQUENCES = {
    "falls": [2.0, 1.5, 1.25, 1.0, 0.875],
    "plateau": [2.0, 1.5, 1.5, 1.5, 1.5, 1.5],
    "bump": [2.0, 1.5, 1.75, 1.625, 1.375, 1.5, 1.5, 1.5],
    "small_steps": [2.0, 1.875, 1.75, 1.625, 1.5, 1.375],
}


def run(values, monitor, patience, min_delta):
    """(stop evaluation or -1, best evaluation) under Keras's callback."""
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    key = "val_loss" if monitor == "loss" else "val_accuracy"
    # mode "auto" infers min for val_loss; this model compiled no accuracy
    # metric it could infer max from.
    cb = keras.callbacks.EarlyStopping(
        monitor=key, patience=patience, min_delta=min_delta,
        mode="min" if monitor == "loss" else "max")
    cb.set_model(model)
    model.stop_training = False
    cb.on_train_begin()
    for epoch, v in enumerate(values):
        cb.on_epoch_end(epoch, {key: v})
        if model.stop_training:
            return epoch, cb.best_epoch
    return -1, cb.best_epoch


def main():
    tensors = []
    for name, losses in SEQUENCES.items():
        for monitor in ("loss", "accuracy"):
            # Accuracies: the same steps, rising.
            values = losses if monitor == "loss" else [3 - v for v in losses]
            for patience in (0, 1, 2, 3):
                for min_delta in (0.0, 0.25):
                    stop, best = run(values, monitor, patience, min_delta)
                    tag = "%s/%s/p%d/d%03d" % (name, monitor, patience,
                                               int(min_delta * 100))
                    tensors += [
                        (tag + "/values", np.array(values, np.float64)),
                        (tag + "/patience", np.int64(patience)),
                        (tag + "/min_delta", np.float64(min_delta)),
                        (tag + "/stop", np.int64(stop)),
                        (tag + "/best", np.int64(best)),
                    ]
    write_golden(
        "early_stopping.txt", tensors,
        "keras.callbacks.EarlyStopping(monitor, patience, min_delta): the\n"
        "evaluation after which it stops training (-1: never) and its best\n"
        "evaluation, per sequence of monitored values\n"
        "(scripts/golden/early_stopping.py).\n")


if __name__ == "__main__":
    main()
