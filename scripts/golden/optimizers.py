"""Generate golden optimizer trajectories with TensorFlow's raw training ops.

Writes tests/golden/optimizers.txt (float32): 10 steps of SGD, Momentum,
Nesterov momentum, AdagradV2, Adam, RMSProp (momentum 0 and 0.5) on one
6-element resource variable, with the variable and slot values after each
step. The update ops are tf.raw_ops.ResourceApply{GradientDescent, Momentum,
AdagradV2, Adam, RMSProp}; each trajectory is also checked against an
independent float64 NumPy implementation of the formulas listed in the output
comments.

Run from the repository root:
    python3 scripts/golden/optimizers.py
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_io import write_golden  # noqa: E402

SEED = 777
STEPS = 10
N = 6

LR = 0.1
MOMENTUM = 0.9
ADAGRAD_INIT = 0.1
ADAGRAD_EPS = 1e-7
ADAM_B1, ADAM_B2, ADAM_EPS = 0.9, 0.999, 1e-7
RMS_RHO, RMS_EPS = 0.9, 1e-7
RMS_MOM2 = 0.5


def c32(v):
    return tf.constant(np.float32(v))


def run(init, grads, slot_inits, step_fn):
    """Run STEPS updates; returns list of [STEPS, N] arrays (var, slots...)."""
    var = tf.Variable(init)
    slots = [tf.Variable(np.full(N, s, np.float32)) for s in slot_inits]
    hist = [[] for _ in range(1 + len(slots))]
    for k in range(STEPS):
        step_fn(k, var, slots, tf.constant(grads[k]))
        for h, v in zip(hist, [var] + slots):
            h.append(v.numpy().copy())
    return [np.stack(h).astype(np.float32) for h in hist]


def ref(init, grads, kind, mom=0.0, b1_pow=None, b2_pow=None):
    """float64 reference implementations of the TF kernel formulas.

    For adam, b1_pow/b2_pow are the (f32-rounded) beta powers fed to the op.
    """
    # hyperparameters exactly as the f32 kernel sees them
    def h(v):
        return float(np.float32(v))

    lr, m_, eps_ag = h(LR), h(MOMENTUM), h(ADAGRAD_EPS)
    b1, b2, eps_ad = h(ADAM_B1), h(ADAM_B2), h(ADAM_EPS)
    rho, eps_rms, mom = h(RMS_RHO), h(RMS_EPS), h(mom)
    w = init.astype(np.float64)
    g_all = grads.astype(np.float64)
    a = np.zeros(N) + (h(ADAGRAD_INIT) if kind == "adagrad" else 0.0)
    b = np.zeros(N)
    out = [[], [], []]
    for k in range(STEPS):
        g = g_all[k]
        if kind == "sgd":
            w = w - lr * g
        elif kind in ("momentum", "nesterov"):
            a = m_ * a + g
            w = w - (lr * g + lr * m_ * a if kind == "nesterov" else lr * a)
        elif kind == "adagrad":
            a = a + g * g
            w = w - lr * g / (np.sqrt(a) + eps_ag)
        elif kind == "adam":
            p1, p2 = float(b1_pow[k]), float(b2_pow[k])
            lr_t = lr * np.sqrt(1 - p2) / (1 - p1)
            a = a + (g - a) * (1 - b1)
            b = b + (g * g - b) * (1 - b2)
            w = w - lr_t * a / (np.sqrt(b) + eps_ad)
        elif kind == "rmsprop":
            a = a + (g * g - a) * (1 - rho)
            b = mom * b + lr * g / np.sqrt(a + eps_rms)
            w = w - b
        out[0].append(w)
        out[1].append(a.copy())
        out[2].append(b.copy())
    return [np.stack(o) for o in out]


def main():
    rng = np.random.default_rng(SEED)
    init = rng.normal(size=N).astype(np.float32)
    grads = rng.normal(size=(STEPS, N)).astype(np.float32)
    # one tiny and one large gradient component to exercise eps / scaling
    grads[3, 2] = np.float32(1e-4)
    grads[6, 5] = np.float32(5.0)

    b1_pow = np.array([ADAM_B1 ** (k + 1) for k in range(STEPS)]).astype(np.float32)
    b2_pow = np.array([ADAM_B2 ** (k + 1) for k in range(STEPS)]).astype(np.float32)

    tensors = [("init", init), ("grads", grads),
               ("lr", np.float32(LR)), ("momentum", np.float32(MOMENTUM)),
               ("adagrad_initial_accumulator", np.float32(ADAGRAD_INIT)),
               ("adagrad_epsilon", np.float32(ADAGRAD_EPS)),
               ("adam_beta1", np.float32(ADAM_B1)),
               ("adam_beta2", np.float32(ADAM_B2)),
               ("adam_epsilon", np.float32(ADAM_EPS)),
               ("adam/beta1_power", b1_pow), ("adam/beta2_power", b2_pow),
               ("rmsprop_rho", np.float32(RMS_RHO)),
               ("rmsprop_epsilon", np.float32(RMS_EPS)),
               ("rmsprop_mom_momentum", np.float32(RMS_MOM2))]
    notes = []

    def record(prefix, results, slot_names, refs):
        tensors.append((prefix + "/var", results[0]))
        for nm, arr in zip(slot_names, results[1:]):
            tensors.append((prefix + "/" + nm, arr))
        diffs = []
        for got, want in zip(results, refs):
            d = float(np.max(np.abs(got - want)))
            diffs.append(d)
        assert max(diffs) < 1e-5, (prefix, diffs)
        notes.append("%s: max abs diff vs float64 ref (var, slots) = %s"
                     % (prefix, ", ".join("%.2g" % d for d in diffs)))

    # SGD
    def sgd(k, var, slots, g):
        tf.raw_ops.ResourceApplyGradientDescent(var=var.handle, alpha=c32(LR), delta=g)
    r = run(init, grads, [], sgd)
    record("sgd", r, [], ref(init, grads, "sgd")[:1])

    # Momentum / Nesterov
    for prefix, nest in (("momentum", False), ("nesterov", True)):
        def mom(k, var, slots, g, nest=nest):
            tf.raw_ops.ResourceApplyMomentum(
                var=var.handle, accum=slots[0].handle, lr=c32(LR), grad=g,
                momentum=c32(MOMENTUM), use_locking=False, use_nesterov=nest)
        r = run(init, grads, [0.0], mom)
        rr = ref(init, grads, prefix)
        record(prefix, r, ["Momentum"], rr[:2])

    # AdagradV2
    def adagrad(k, var, slots, g):
        tf.raw_ops.ResourceApplyAdagradV2(
            var=var.handle, accum=slots[0].handle, lr=c32(LR),
            epsilon=c32(ADAGRAD_EPS), grad=g, update_slots=True)
    r = run(init, grads, [ADAGRAD_INIT], adagrad)
    record("adagrad", r, ["Adagrad"], ref(init, grads, "adagrad")[:2])

    # Adam
    def adam(k, var, slots, g):
        tf.raw_ops.ResourceApplyAdam(
            var=var.handle, m=slots[0].handle, v=slots[1].handle,
            beta1_power=c32(b1_pow[k]), beta2_power=c32(b2_pow[k]), lr=c32(LR),
            beta1=c32(ADAM_B1), beta2=c32(ADAM_B2), epsilon=c32(ADAM_EPS),
            grad=g, use_nesterov=False)
    r = run(init, grads, [0.0, 0.0], adam)
    record("adam", r, ["Adam", "Adam_1"], ref(init, grads, "adam", b1_pow=b1_pow, b2_pow=b2_pow))

    # RMSProp (ms0 = 0, mom0 = 0)
    for prefix, m in (("rmsprop", 0.0), ("rmsprop_mom", RMS_MOM2)):
        def rms(k, var, slots, g, m=m):
            tf.raw_ops.ResourceApplyRMSProp(
                var=var.handle, ms=slots[0].handle, mom=slots[1].handle,
                lr=c32(LR), rho=c32(RMS_RHO), momentum=c32(m),
                epsilon=c32(RMS_EPS), grad=g)
        r = run(init, grads, [0.0, 0.0], rms)
        record(prefix, r, ["RMSProp", "RMSProp_1"], ref(init, grads, "rmsprop", m))

    comment = """\
Generated by scripts/golden/optimizers.py (numpy seed %d), all f32.
init [6]: initial variable; grads [10,6]: gradient applied at step k is row k-1
(grads[3,2]=1e-4 and grads[6,5]=5.0 are set by hand).
<opt>/var and slot tensors are [10,6]; row k-1 = value AFTER step k (k=1..10).
Ops: tf.raw_ops.ResourceApply* on resource variables, float32, lr = 0.1 const.
Hyperparameters (also written as f32 scalars): lr=0.1, momentum=0.9,
adagrad initial accumulator=0.1 eps=1e-7, adam b1=0.9 b2=0.999 eps=1e-7,
rmsprop rho=0.9 eps=1e-7 momentum=0 (rmsprop) / 0.5 (rmsprop_mom).
Update formulas (TF kernels; verified vs a float64 numpy implementation that
uses the f32-rounded hyperparameters, e.g. 1-f32(0.999) = 0.00099998713,
which differs from 0.001 by 1.3e-5 relative; diffs below):
  sgd:       var -= lr*g
  momentum:  accum = accum*m + g;  var -= lr*accum        (slot Momentum, init 0)
  nesterov:  accum = accum*m + g;  var -= lr*g + lr*m*accum  (new accum)
  adagrad:   accum += g*g;  var -= lr*g/(sqrt(accum) + eps)  (slot Adagrad,
             init 0.1; ApplyAdagradV2, eps OUTSIDE the sqrt)
  adam:      t = k (1-based step); beta1_power=f32(b1^t), beta2_power=f32(b2^t)
             (computed in float64 then rounded; written as adam/beta1_power,
             adam/beta2_power [10]); lr_t = lr*sqrt(1-b2^t)/(1-b1^t);
             m += (g-m)*(1-b1); v += (g*g-v)*(1-b2);
             var -= lr_t*m/(sqrt(v) + eps)   (slots Adam=m, Adam_1=v, init 0;
             eps is NOT bias-corrected, i.e. the 'epsilon hat' form).
             NOTE: 1-f32(b2^t) differs from exact 1-0.999^t by ~1e-5 relative;
             feeding exact float64 powers instead gives ~9e-7 abs diffs in
             adam/var (vs ~1.4e-7 with the written f32 powers).
  rmsprop:   ms += (g*g-ms)*(1-rho); mom = mom*momentum + lr*g/sqrt(ms + eps);
             var -= mom   (slots RMSProp=ms, RMSProp_1=mom, both init 0;
             eps INSIDE the sqrt; non-centered)
""" % SEED
    write_golden("optimizers.txt", tensors, comment, notes)


if __name__ == "__main__":
    main()
