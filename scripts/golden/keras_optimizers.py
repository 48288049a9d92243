"""Golden trajectories of Keras 3's Adamax, Lion and Nadam (keras.optimizers).

Writes tests/golden/keras_optimizers.txt (float32): 10 steps of each, as
shipped with TensorFlow (TF backend, eager, CPU), at its default
hyperparameters and learning rate 0.1, on the 6-element variable and the
gradients of scripts/golden/optimizers.py. After each step the variable and
its slots are recorded (adamax: m, u; lion: m; nadam: m, v). Each
trajectory is also
checked, bit for bit, against a float32 NumPy re-implementation of the
Keras formulas (written in the output's comment).

Run from the repository root:
    python3 scripts/golden/keras_optimizers.py
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

STEPS = 10
N = 6
LR = 0.1
f = np.float32


def run_keras(opt, slots_of, init, grads):
    var = keras.Variable(init, name="kernel", dtype="float32")
    opt.build([var])
    hist = []
    for k in range(STEPS):
        opt.apply_gradients([(tf.constant(grads[k]), var)])
        hist.append([np.array(v.numpy(), f)
                     for v in [var] + slots_of(opt, var)])
    assert int(opt.iterations.numpy()) == STEPS
    return [np.stack([h[i] for h in hist]) for i in range(len(hist[0]))]


def ref_adamax(init, grads, hp):
    """Keras 3 Adamax.update_step, each operation in float32."""
    lr, eps, b2 = f(LR), f(hp["epsilon"]), f(hp["beta_2"])
    omb1 = f(1 - hp["beta_1"])  # A Python float, rounded when multiplied.
    w, m, u = init.astype(f).copy(), np.zeros(N, f), np.zeros(N, f)
    out = ([], [], [])
    for k in range(STEPS):
        g = grads[k].astype(f)
        b1_pow = keras.ops.power(keras.ops.cast(hp["beta_1"], "float32"),
                                 keras.ops.cast(k + 1, "float32")).numpy()
        m = m + (g - m) * omb1
        u = np.maximum(b2 * u, np.abs(g))
        w = w - (lr * m) / ((f(1) - b1_pow) * (u + eps))
        for o, x in zip(out, (w, m, u)):
            o.append(x.copy())
    return [np.stack(o) for o in out]


def ref_lion(init, grads, hp):
    """Keras 3 Lion.update_step, each operation in float32."""
    lr, b1, b2 = f(LR), f(hp["beta_1"]), f(hp["beta_2"])
    omb1, omb2 = f(1) - b1, f(1) - b2  # 1.0 - a float32 tensor.
    w, m = init.astype(f).copy(), np.zeros(N, f)
    out = ([], [])
    for k in range(STEPS):
        g = grads[k].astype(f)
        w = w - lr * np.sign(m * b1 + g * omb1)
        m = m * b2 + g * omb2
        for o, x in zip(out, (w, m)):
            o.append(x.copy())
    return [np.stack(o) for o in out]


def ref_nadam(init, grads, hp):
    """Keras 3 Nadam (_backend_update_step, update_step), in float32."""
    lr, eps = f(LR), f(hp["epsilon"])
    b1, b2 = f(hp["beta_1"]), f(hp["beta_2"])
    w, m, v = init.astype(f).copy(), np.zeros(N, f), np.zeros(N, f)
    product = f(1)

    def factor(i):  # 1 - 0.5 * 0.96^i, with 0.96 cast to float32.
        p = keras.ops.power(f(0.96), keras.ops.cast(i, "float32")).numpy()
        return f(1) - f(0.5) * f(p)

    out = ([], [], [])
    for k in range(STEPS):
        t = k + 1
        g = grads[k].astype(f)
        product = product * b1 * factor(t)
        u, u_next = b1 * factor(t), b1 * factor(t + 1)
        product_next = product * u_next
        b2_pow = keras.ops.power(b2, keras.ops.cast(t, "float32")).numpy()
        m = m + (g - m) * (f(1) - b1)
        v = v + (g * g - v) * (f(1) - b2)
        m_hat = (u_next * m) / (f(1) - product_next) + \
            ((f(1) - u) * g) / (f(1) - product)
        v_hat = v / (f(1) - b2_pow)
        w = w - (m_hat * lr) / (np.sqrt(v_hat) + eps)
        for o, x in zip(out, (w, m, v)):
            o.append(x.copy())
    return [np.stack(o) for o in out]


def main():
    init, grads = optimizers.inputs()
    assert grads.shape == (STEPS, N)
    tensors = [("init", init), ("grads", grads), ("lr", f(LR))]
    notes = []

    adamax = keras.optimizers.Adamax(learning_rate=LR)
    hp = {"beta_1": adamax.beta_1, "beta_2": adamax.beta_2,
          "epsilon": adamax.epsilon}
    got = run_keras(adamax, lambda o, v: [o._m[o._get_variable_index(v)],
                                          o._u[o._get_variable_index(v)]],
                    init, grads)
    for name, a, b in zip(("var", "Adamax", "Adamax_1"), got,
                          ref_adamax(init, grads, hp)):
        assert np.array_equal(a.view(np.int32), b.view(np.int32)), (name, a - b)
        tensors.append(("adamax/" + name, a))
    tensors += [("adamax/beta1", f(hp["beta_1"])),
                ("adamax/beta2", f(hp["beta_2"])),
                ("adamax/epsilon", f(hp["epsilon"]))]
    notes.append("adamax: identical bit for bit to the float32 NumPy "
                 "re-implementation")

    lion = keras.optimizers.Lion(learning_rate=LR)
    hp_lion = {"beta_1": lion.beta_1, "beta_2": lion.beta_2}
    got = run_keras(lion, lambda o, v: [o._momentums[o._get_variable_index(v)]],
                    init, grads)
    for name, a, b in zip(("var", "Lion"), got, ref_lion(init, grads, hp_lion)):
        assert np.array_equal(a.view(np.int32), b.view(np.int32)), (name, a - b)
        tensors.append(("lion/" + name, a))
    tensors += [("lion/beta1", f(hp_lion["beta_1"])),
                ("lion/beta2", f(hp_lion["beta_2"]))]
    notes.append("lion: identical bit for bit to the float32 NumPy "
                 "re-implementation")

    nadam = keras.optimizers.Nadam(learning_rate=LR)
    hp_nadam = {"beta_1": nadam.beta_1, "beta_2": nadam.beta_2,
                "epsilon": nadam.epsilon}
    got = run_keras(nadam,
                    lambda o, v: [o._momentums[o._get_variable_index(v)],
                                  o._velocities[o._get_variable_index(v)]],
                    init, grads)
    for name, a, b in zip(("var", "Nadam", "Nadam_1"), got,
                          ref_nadam(init, grads, hp_nadam)):
        assert np.array_equal(a.view(np.int32), b.view(np.int32)), (name, a - b)
        tensors.append(("nadam/" + name, a))
    tensors += [("nadam/beta1", f(hp_nadam["beta_1"])),
                ("nadam/beta2", f(hp_nadam["beta_2"])),
                ("nadam/epsilon", f(hp_nadam["epsilon"]))]
    notes.append("nadam: identical bit for bit to the float32 NumPy "
                 "re-implementation")

    # Away from the defaults (the NumPy re-implementation reads them too).
    nadam_hp = keras.optimizers.Nadam(learning_rate=LR, beta_1=0.8,
                                      beta_2=0.99, epsilon=1e-3)
    hp_nadam2 = {"beta_1": nadam_hp.beta_1, "beta_2": nadam_hp.beta_2,
                 "epsilon": nadam_hp.epsilon}
    got = run_keras(nadam_hp,
                    lambda o, v: [o._momentums[o._get_variable_index(v)],
                                  o._velocities[o._get_variable_index(v)]],
                    init, grads)
    for name, a, b in zip(("var", "Nadam", "Nadam_1"), got,
                          ref_nadam(init, grads, hp_nadam2)):
        assert np.array_equal(a.view(np.int32), b.view(np.int32)), (name, a - b)
        tensors.append(("nadam_hp/" + name, a))
    tensors += [("nadam_hp/beta1", f(hp_nadam2["beta_1"])),
                ("nadam_hp/beta2", f(hp_nadam2["beta_2"])),
                ("nadam_hp/epsilon", f(hp_nadam2["epsilon"]))]
    notes.append("nadam_hp (beta_1 0.8, beta_2 0.99, epsilon 1e-3): identical "
                 "bit for bit to the float32 NumPy re-implementation")

    comment = """\
Generated by scripts/golden/keras_optimizers.py (numpy seed %d: the init and
grads of optimizers.txt), all f32, with keras %s (TF backend, eager, CPU).
init [6]: the variable's initial value; grads [10,6]: row k-1 is step k's
gradient. <opt>/var and the slots are [10,6]: row k-1 = value AFTER step k.
keras.optimizers.Adamax(learning_rate=0.1) at its defaults (beta_1=%r,
beta_2=%r, epsilon=%r), slots adamax/Adamax (m) and adamax/Adamax_1 (u),
each operation in float32 (Adamax.update_step):
  m = m + (g - m)*f32(1 - beta_1)             (1 - beta_1 in float64)
  u = max(f32(beta_2)*u, |g|)
  w = w - (lr*m) / ((1 - pow(f32(beta_1), f32(t)))*(u + f32(epsilon)))
keras.optimizers.Lion(learning_rate=0.1) at its defaults (beta_1=%r,
beta_2=%r), slot lion/Lion (m) (Lion.update_step):
  w = w - lr*sign(m*f32(beta_1) + g*(1 - f32(beta_1)))
  m = m*f32(beta_2) + g*(1 - f32(beta_2))      (1 - beta in float32)
keras.optimizers.Nadam(learning_rate=0.1) at its defaults (beta_1=%r,
beta_2=%r, epsilon=%r), slots nadam/Nadam (m) and nadam/Nadam_1 (v)
(Nadam._backend_update_step, update_step), all in float32:
  f(i) = 1 - 0.5*pow(f32(0.96), f32(i)); prod = prod*beta_1*f(t) (from 1)
  u = beta_1*f(t); u' = beta_1*f(t + 1); prod' = prod*u'
  m = m + (g - m)*(1 - beta_1); v = v + (g*g - v)*(1 - beta_2)
  w = w - ((u'*m)/(1 - prod') + ((1 - u)*g)/(1 - prod))*lr /
          (sqrt(v/(1 - pow(beta_2, t))) + epsilon)
""" % (optimizers.SEED, keras.__version__, hp["beta_1"], hp["beta_2"],
       hp["epsilon"], hp_lion["beta_1"], hp_lion["beta_2"],
       hp_nadam["beta_1"], hp_nadam["beta_2"], hp_nadam["epsilon"])
    write_golden("keras_optimizers.txt", tensors, comment, notes, indent="")


if __name__ == "__main__":
    main()
