"""Generate golden optimizer trajectories with TensorFlow's raw training ops.

Writes tests/golden/optimizers.txt (float32): 10 steps of SGD, Momentum,
Nesterov momentum, AdagradV2, Adam, RMSProp (momentum 0 and 0.5) on one
6-element resource variable, with the variable and slot values after each
step; at the registered defaults, and again (hp/*) with every
hyperparameter and the learning rate away from them. The update ops are tf.raw_ops.ResourceApply{GradientDescent, Momentum,
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

# The defaults the optimizers are registered with (and lr 0.1); the tensors
# of these runs are named <opt>/<tensor>.
DEFAULTS = {"lr": 0.1, "momentum": 0.9, "adagrad_init": 0.1,
            "adagrad_eps": 1e-7, "adam_b1": 0.9, "adam_b2": 0.999,
            "adam_eps": 1e-7, "rms_rho": 0.9, "rms_eps": 1e-7,
            "rms_momentum": 0.5}
# Every hyperparameter away from its default, and another rate: hp/<opt>/...
NON_DEFAULT = {"lr": 0.03, "momentum": 0.5, "adagrad_init": 0.5,
               "adagrad_eps": 1e-3, "adam_b1": 0.5, "adam_b2": 0.9,
               "adam_eps": 1e-2, "rms_rho": 0.5, "rms_eps": 1e-3,
               "rms_momentum": 0.3}


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


def powers(beta):
    """beta^t, t = 1..STEPS, as TensorFlow forms the powers it feeds
    ResourceApplyAdam: tf.pow of the float32 beta and step (Keras 2's Adam),
    not float64 powers of the unrounded beta."""
    return np.array([tf.pow(tf.constant(np.float32(beta)),
                            tf.constant(np.float32(k + 1))).numpy()
                     for k in range(STEPS)], np.float32)


def ref(init, grads, kind, hp, mom=0.0):
    """float64 reference implementations of the TF kernel formulas, with the
    hyperparameters exactly as the f32 kernel sees them."""
    def h(v):
        return float(np.float32(v))

    lr, m_, eps_ag = h(hp["lr"]), h(hp["momentum"]), h(hp["adagrad_eps"])
    b1, b2, eps_ad = h(hp["adam_b1"]), h(hp["adam_b2"]), h(hp["adam_eps"])
    rho, eps_rms, mom = h(hp["rms_rho"]), h(hp["rms_eps"]), h(mom)
    b1_pow, b2_pow = powers(hp["adam_b1"]), powers(hp["adam_b2"])
    w = init.astype(np.float64)
    g_all = grads.astype(np.float64)
    a = np.zeros(N) + (h(hp["adagrad_init"]) if kind == "adagrad" else 0.0)
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


def trajectories(init, grads, hp, prefix, tensors, notes):
    """Every optimizer's run at `hp`, recorded as <prefix><opt>/<tensor>."""
    lr = hp["lr"]
    b1_pow, b2_pow = powers(hp["adam_b1"]), powers(hp["adam_b2"])

    def record(name, results, slot_names, refs):
        tensors.append((prefix + name + "/var", results[0]))
        for nm, arr in zip(slot_names, results[1:]):
            tensors.append((prefix + name + "/" + nm, arr))
        diffs = [float(np.max(np.abs(got - want)))
                 for got, want in zip(results, refs)]
        assert max(diffs) < 1e-5, (prefix + name, diffs)
        notes.append("%s: max abs diff vs float64 ref (var, slots) = %s"
                     % (prefix + name, ", ".join("%.2g" % d for d in diffs)))

    def sgd(k, var, slots, g):
        tf.raw_ops.ResourceApplyGradientDescent(var=var.handle, alpha=c32(lr),
                                                delta=g)
    record("sgd", run(init, grads, [], sgd), [],
           ref(init, grads, "sgd", hp)[:1])

    for name, nest in (("momentum", False), ("nesterov", True)):
        def mom(k, var, slots, g, nest=nest):
            tf.raw_ops.ResourceApplyMomentum(
                var=var.handle, accum=slots[0].handle, lr=c32(lr), grad=g,
                momentum=c32(hp["momentum"]), use_locking=False,
                use_nesterov=nest)
        record(name, run(init, grads, [0.0], mom), ["Momentum"],
               ref(init, grads, name, hp)[:2])

    def adagrad(k, var, slots, g):
        tf.raw_ops.ResourceApplyAdagradV2(
            var=var.handle, accum=slots[0].handle, lr=c32(lr),
            epsilon=c32(hp["adagrad_eps"]), grad=g, update_slots=True)
    record("adagrad", run(init, grads, [hp["adagrad_init"]], adagrad),
           ["Adagrad"], ref(init, grads, "adagrad", hp)[:2])

    def adam(k, var, slots, g):
        tf.raw_ops.ResourceApplyAdam(
            var=var.handle, m=slots[0].handle, v=slots[1].handle,
            beta1_power=c32(b1_pow[k]), beta2_power=c32(b2_pow[k]),
            lr=c32(lr), beta1=c32(hp["adam_b1"]), beta2=c32(hp["adam_b2"]),
            epsilon=c32(hp["adam_eps"]), grad=g, use_nesterov=False)
    record("adam", run(init, grads, [0.0, 0.0], adam), ["Adam", "Adam_1"],
           ref(init, grads, "adam", hp))

    # RMSProp (ms0 = 0, mom0 = 0): at the defaults without and with
    # momentum; away from them, with it.
    cases = (("rmsprop", 0.0), ("rmsprop_mom", hp["rms_momentum"]))
    if prefix:
        cases = (("rmsprop", hp["rms_momentum"]),)
    for name, m in cases:
        def rms(k, var, slots, g, m=m):
            tf.raw_ops.ResourceApplyRMSProp(
                var=var.handle, ms=slots[0].handle, mom=slots[1].handle,
                lr=c32(lr), rho=c32(hp["rms_rho"]), momentum=c32(m),
                epsilon=c32(hp["rms_eps"]), grad=g)
        record(name, run(init, grads, [0.0, 0.0], rms),
               ["RMSProp", "RMSProp_1"], ref(init, grads, "rmsprop", hp, m))


def hyperparameters(hp, prefix):
    """The f32 scalars a test checks its optimizers' settings against."""
    names = (("lr", "lr"), ("momentum", "momentum"),
             ("adagrad_initial_accumulator", "adagrad_init"),
             ("adagrad_epsilon", "adagrad_eps"), ("adam_beta1", "adam_b1"),
             ("adam_beta2", "adam_b2"), ("adam_epsilon", "adam_eps"),
             ("rmsprop_rho", "rms_rho"), ("rmsprop_epsilon", "rms_eps"))
    out = [(prefix + name, np.float32(hp[key])) for name, key in names]
    out += [(prefix + "adam/beta1_power", powers(hp["adam_b1"])),
            (prefix + "adam/beta2_power", powers(hp["adam_b2"]))]
    mom_name = "rmsprop_momentum" if prefix else "rmsprop_mom_momentum"
    return out + [(prefix + mom_name, np.float32(hp["rms_momentum"]))]


def inputs():
    """The initial variable [N] and the STEPS gradients [STEPS, N] (also
    scripts/golden/adamw.py's)."""
    rng = np.random.default_rng(SEED)
    init = rng.normal(size=N).astype(np.float32)
    grads = rng.normal(size=(STEPS, N)).astype(np.float32)
    # one tiny and one large gradient component to exercise eps / scaling
    grads[3, 2] = np.float32(1e-4)
    grads[6, 5] = np.float32(5.0)
    return init, grads


def main():
    init, grads = inputs()

    tensors = [("init", init), ("grads", grads)]
    tensors += hyperparameters(DEFAULTS, "")
    tensors += hyperparameters(NON_DEFAULT, "hp/")
    notes = []
    trajectories(init, grads, DEFAULTS, "", tensors, notes)
    trajectories(init, grads, NON_DEFAULT, "hp/", tensors, notes)

    comment = """\
Generated by scripts/golden/optimizers.py (numpy seed %d), all f32.
init [6]: initial variable; grads [10,6]: gradient applied at step k is row k-1
(grads[3,2]=1e-4 and grads[6,5]=5.0 are set by hand).
<opt>/var and slot tensors are [10,6]; row k-1 = value AFTER step k (k=1..10).
Ops: tf.raw_ops.ResourceApply* on resource variables, float32, lr = 0.1 const.
Hyperparameters (also written as f32 scalars): lr=0.1, momentum=0.9,
adagrad initial accumulator=0.1 eps=1e-7, adam b1=0.9 b2=0.999 eps=1e-7,
rmsprop rho=0.9 eps=1e-7 momentum=0 (rmsprop) / 0.5 (rmsprop_mom).
hp/<opt>/*: the same runs with every hyperparameter away from its default
(written as hp/<name> scalars and hp/adam/beta*_power): lr=0.03,
momentum=0.5, adagrad initial accumulator=0.5 eps=1e-3, adam b1=0.5 b2=0.9
eps=1e-2, rmsprop rho=0.5 eps=1e-3 momentum=0.3 (hp/rmsprop).
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
