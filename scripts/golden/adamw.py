"""Generate golden AdamW trajectories with Keras (keras.optimizers.AdamW).

Writes tests/golden/adamw.txt (float32): 10 steps of Keras 3's AdamW, as
shipped with TensorFlow (TF backend, eager, CPU), at its default
hyperparameters and learning rate 0.1, on two 6-element variables that start
from the same values and get the same gradients as in
scripts/golden/optimizers.py: "kernel" is decayed, "bias" is excluded with
optimizer.exclude_from_weight_decay(var_names=["bias"]). After each step the
variable and its two slots (m, v) are recorded. Each trajectory is also
checked, bit for bit, against a float32 NumPy re-implementation of the Keras
formulas (listed in the output comments).

Run from the repository root:
    python3 scripts/golden/adamw.py
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
import optimizers  # noqa: E402  (the same init and gradients)

SEED = optimizers.SEED  # optimizers.inputs() draws the init and gradients
STEPS = 10
N = 6
LR = 0.1
EXCLUDE = "bias"


def keras_defaults():
    o = keras.optimizers.AdamW()
    return {"weight_decay": o.weight_decay, "beta_1": o.beta_1,
            "beta_2": o.beta_2, "epsilon": o.epsilon}


def run_keras(init, grads, hp):
    opt = keras.optimizers.AdamW(learning_rate=LR, **hp)
    opt.exclude_from_weight_decay(var_names=[EXCLUDE])
    kernel = keras.Variable(init, name="kernel", dtype="float32")
    bias = keras.Variable(init, name="bias", dtype="float32")
    opt.build([kernel, bias])
    hist = {name: ([], [], []) for name in ("kernel", "bias")}
    for k in range(STEPS):
        g = tf.constant(grads[k])
        opt.apply_gradients([(g, kernel), (g, bias)])
        for name, var in (("kernel", kernel), ("bias", bias)):
            i = opt._get_variable_index(var)
            for h, v in zip(hist[name],
                            (var, opt._momentums[i], opt._velocities[i])):
                h.append(np.array(v.numpy(), np.float32))
    assert int(opt.iterations.numpy()) == STEPS
    return {name: [np.stack(h) for h in hs] for name, hs in hist.items()}


def keras_beta_powers(beta):
    """ops.power(cast(beta, f32), cast(t, f32)) as Keras's update_step."""
    return np.array([keras.ops.power(keras.ops.cast(beta, "float32"),
                                     keras.ops.cast(t, "float32")).numpy()
                     for t in range(1, STEPS + 1)], np.float32)


def ref_f32(init, grads, hp, decay, b1_pow, b2_pow):
    """The Keras formulas, each operation in float32, in Keras's order."""
    f = np.float32
    lr, wd, eps = f(LR), f(hp["weight_decay"]), f(hp["epsilon"])
    # 1 - beta is formed on Python floats, then rounded to float32.
    omb1, omb2 = f(1 - hp["beta_1"]), f(1 - hp["beta_2"])
    w = init.astype(f).copy()
    m = np.zeros(N, f)
    v = np.zeros(N, f)
    out = ([], [], [])
    for k in range(STEPS):
        g = grads[k].astype(f)
        if decay:
            w = w - w * wd * lr
        alpha = lr * np.sqrt(f(1) - b2_pow[k]) / (f(1) - b1_pow[k])
        m = m + (g - m) * omb1
        v = v + (g * g - v) * omb2
        w = w - (m * alpha) / (np.sqrt(v) + eps)
        for o, x in zip(out, (w, m, v)):
            o.append(x.copy())
    return [np.stack(o) for o in out]


def ref_f64(init, grads, hp, decay):
    """The same recurrence in float64 with exact hyperparameters."""
    w = init.astype(np.float64)
    m = np.zeros(N)
    v = np.zeros(N)
    b1, b2 = hp["beta_1"], hp["beta_2"]
    out = []
    for k in range(STEPS):
        g = grads[k].astype(np.float64)
        t = k + 1
        if decay:
            w = w - w * hp["weight_decay"] * LR
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        w = w - LR * np.sqrt(1 - b2**t) / (1 - b1**t) * m / (
            np.sqrt(v) + hp["epsilon"])
        out.append(w.copy())
    return np.stack(out)


def main():
    init, grads = optimizers.inputs()
    assert grads.shape == (STEPS, N)

    hp = keras_defaults()
    got = run_keras(init, grads, hp)
    b1_pow = keras_beta_powers(hp["beta_1"])
    b2_pow = keras_beta_powers(hp["beta_2"])

    tensors = [("init", init), ("grads", grads), ("lr", np.float32(LR)),
               ("weight_decay", np.float32(hp["weight_decay"])),
               ("beta1", np.float32(hp["beta_1"])),
               ("beta2", np.float32(hp["beta_2"])),
               ("epsilon", np.float32(hp["epsilon"])),
               ("beta1_power", b1_pow), ("beta2_power", b2_pow)]
    notes = []
    for name, decay in (("kernel", True), ("bias", False)):
        w, m, v = got[name]
        tensors += [(name + "/var", w), (name + "/AdamW", m),
                    (name + "/AdamW_1", v)]
        for which, a, b in zip(("var", "m", "v"), (w, m, v),
                               ref_f32(init, grads, hp, decay, b1_pow,
                                       b2_pow)):
            assert np.array_equal(a.view(np.int32), b.view(np.int32)), (
                name, which, a - b)
        d64 = float(np.max(np.abs(w - ref_f64(init, grads, hp, decay))))
        notes.append("%s: identical bit for bit to the float32 NumPy "
                     "re-implementation; max |var - float64 ref| = %.2g"
                     % (name, d64))
    # The exclusion matters: the two trajectories differ from step 1 on.
    assert np.all(got["kernel"][0][0] != got["bias"][0][0])
    # And Keras's float32 powers are not float64 powers rounded.
    f64_pow = np.array([hp["beta_1"] ** t for t in range(1, STEPS + 1)],
                       np.float32)
    notes.append("beta1_power differs from f32(0.9^t computed in float64) "
                 "at %d of %d steps" % (int(np.sum(f64_pow != b1_pow)), STEPS))

    comment = """\
Generated by scripts/golden/adamw.py (numpy seed %d: the init and grads of
optimizers.txt), all f32, with keras %s (TF backend, eager, CPU).
init [6]: initial value of both variables; grads [10,6]: the gradient of both
variables at step k is row k-1 (grads[3,2]=1e-4 and grads[6,5]=5.0 are set
by hand).
keras.optimizers.AdamW(learning_rate=0.1) at its defaults (written as f32
scalars): weight_decay=%r, beta_1=%r, beta_2=%r, epsilon=%r;
exclude_from_weight_decay(var_names=["%s"]). Variables: keras.Variable named
"kernel" (decayed) and "bias" (excluded: re.search("bias", name)).
<kernel|bias>/var, /AdamW (m) and /AdamW_1 (v) are [10,6]; row k-1 = value
AFTER step k (k=1..10). All in float32, in this order (Keras 3
BaseOptimizer._apply_weight_decay, then Adam.update_step):
  decayed only: w = w - w*wd*lr         (wd = f32(weight_decay), lr = f32(lr))
  t = f32(iterations + 1)
  beta1_power = pow(f32(beta_1), t), beta2_power = pow(f32(beta_2), t)
                (tf.pow in float32, written as beta1_power/beta2_power [10];
                NOT float64 powers rounded, unlike ApplyAdam's inputs)
  alpha = lr*sqrt(1 - beta2_power) / (1 - beta1_power)
  m = m + (g - m)*f32(1 - beta_1)       (1 - beta_1 in float64, then rounded;
  v = v + (g*g - v)*f32(1 - beta_2)      not 1 - f32(beta_1) as in ApplyAdam)
  w = w - (m*alpha) / (sqrt(v) + f32(epsilon))
""" % (SEED, keras.__version__, hp["weight_decay"], hp["beta_1"],
       hp["beta_2"], hp["epsilon"], EXCLUDE)
    write_golden("adamw.txt", tensors, comment, notes, indent="")


if __name__ == "__main__":
    main()
