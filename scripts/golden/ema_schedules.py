"""Generate golden values for EMA and learning-rate schedules with TensorFlow.

Writes tests/golden/ema_schedules.txt:
  * ema/*   (f32): tf.compat.v1.train.ExponentialMovingAverage(decay=0.99)
             shadows over 10 steps, with and without num_updates;
  * sched/* (f64): Keras learning-rate schedules (ExponentialDecay,
             PiecewiseConstantDecay, CosineDecay with and without warmup)
             evaluated at fixed integer steps.
Each result is cross-checked against an independent NumPy implementation of
the formulas documented in the output file's comments.

Run from the repository root:
    python3 scripts/golden/ema_schedules.py
"""

import math
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_io import write_golden  # noqa: E402

SEED = 4242
DECAY = 0.99
STEPS = 10
SCHED_STEPS = [0, 1, 5, 10, 99, 100, 101, 199, 200, 250, 301, 599, 600, 700,
               999, 1000, 1400, 1500, 3100]


def ema_run(init, values, with_num_updates):
    v = tf.Variable(init)
    counter = tf.Variable(0, dtype=tf.int64)
    ema = tf.compat.v1.train.ExponentialMovingAverage(
        decay=DECAY, num_updates=counter if with_num_updates else None)
    # The shadow is created (= current value of v) by the first apply(). Do a
    # creation apply while v == init: it leaves shadow == init (the update is
    # shadow -= (shadow - v) * (1 - d) with shadow == v), whatever d is.
    ema.apply([v])
    assert np.array_equal(ema.average(v).numpy(), init)
    rows = []
    for k in range(1, STEPS + 1):
        v.assign(values[k - 1])
        counter.assign(k)
        ema.apply([v])
        rows.append(ema.average(v).numpy().copy())
    return np.stack(rows).astype(np.float32)


def ema_ref(init, values, with_num_updates):
    """float32 re-implementation of TF's arithmetic."""
    s = init.astype(np.float32).copy()
    rows = []
    for k in range(1, STEPS + 1):
        d = np.float32(DECAY)
        if with_num_updates:
            n = np.float32(k)
            d = min(d, (np.float32(1) + n) / (np.float32(10) + n))
        one_minus = np.float32(1) - np.float32(d)
        s = s - (s - values[k - 1]) * one_minus
        rows.append(s.copy())
    return np.stack(rows)


def sched_ref(name, step):
    t = float(step)
    if name == "exponential_decay":
        return 0.1 * 0.5 ** (t / 100.0)
    if name == "exponential_decay_staircase":
        return 0.1 * 0.5 ** math.floor(t / 100.0)
    if name == "piecewise_constant":
        return 0.1 if t <= 100 else (0.01 if t <= 500 else 0.001)
    if name == "cosine_decay":
        s = min(t, 1000.0)
        return 0.1 * ((1 - 0.05) * 0.5 * (1 + math.cos(math.pi * s / 1000.0)) + 0.05)
    if name == "cosine_decay_warmup":
        s = min(t, 1000.0 + 100.0)
        if s < 100.0:
            return 0.0 + (0.1 - 0.0) * (s / 100.0)
        s -= 100.0
        return 0.1 * (0.5 * (1 + math.cos(math.pi * s / 1000.0)))
    if name == "polynomial_decay":  # decay 1000, end 0.001, power 0.5
        s = min(t, 1000.0)
        return (0.1 - 0.001) * (1 - s / 1000.0) ** 0.5 + 0.001
    if name == "polynomial_decay_cycle":  # decay 300, end 0.01, power 2
        d = 300.0 * (1.0 if t == 0 else math.ceil(t / 300.0))
        return (0.1 - 0.01) * (1 - t / d) ** 2.0 + 0.01
    if name == "inverse_time_decay":
        return 0.1 / (1 + 0.5 * (t / 100.0))
    if name == "inverse_time_decay_staircase":
        return 0.1 / (1 + 0.5 * math.floor(t / 100.0))
    if name in ("cosine_decay_restarts", "cosine_decay_restarts_even"):
        t_mul, m_mul = (2.0, 0.8) if name == "cosine_decay_restarts" else (1.0, 1.0)
        c = t / 200.0
        if t_mul == 1.0:
            i = math.floor(c)
            c -= i
        else:
            i = math.floor(math.log(1.0 - c * (1.0 - t_mul)) / math.log(t_mul))
            c = (c - (1.0 - t_mul ** i) / (1.0 - t_mul)) / t_mul ** i
        cosine = 0.5 * m_mul ** i * (1.0 + math.cos(math.pi * c))
        return 0.1 * ((1 - 0.1) * cosine + 0.1)
    raise KeyError(name)


def main():
    rng = np.random.default_rng(SEED)
    tensors = []
    notes = []

    # ---------------- EMA ----------------
    init = rng.normal(size=4).astype(np.float32)
    values = rng.normal(size=(STEPS, 4)).astype(np.float32)
    sh_n = ema_run(init, values, True)
    sh_p = ema_run(init, values, False)
    for nm, got, want in (("num_updates", sh_n, ema_ref(init, values, True)),
                          ("plain", sh_p, ema_ref(init, values, False))):
        d = float(np.max(np.abs(got - want)))
        assert d < 1e-6, (nm, d)
        notes.append("ema %s: max|TF - f32 numpy formula| = %.3g" % (nm, d))
    tensors += [("ema/decay", np.float32(DECAY)), ("ema/init", init),
                ("ema/values", values), ("ema/shadow_num_updates", sh_n),
                ("ema/shadow_plain", sh_p)]

    # ---------------- schedules ----------------
    ks = tf.keras.optimizers.schedules
    f = np.float64
    scheds = [
        ("exponential_decay", ks.ExponentialDecay(f(0.1), decay_steps=100,
                                                  decay_rate=f(0.5), staircase=False)),
        ("exponential_decay_staircase", ks.ExponentialDecay(
            f(0.1), decay_steps=100, decay_rate=f(0.5), staircase=True)),
        ("piecewise_constant", ks.PiecewiseConstantDecay(
            boundaries=[100, 500], values=[f(0.1), f(0.01), f(0.001)])),
        ("cosine_decay", ks.CosineDecay(f(0.1), decay_steps=1000, alpha=f(0.05))),
        ("polynomial_decay", ks.PolynomialDecay(
            f(0.1), decay_steps=1000, end_learning_rate=f(0.001), power=f(0.5))),
        ("polynomial_decay_cycle", ks.PolynomialDecay(
            f(0.1), decay_steps=300, end_learning_rate=f(0.01), power=f(2.0),
            cycle=True)),
        ("inverse_time_decay", ks.InverseTimeDecay(
            f(0.1), decay_steps=100, decay_rate=f(0.5))),
        ("inverse_time_decay_staircase", ks.InverseTimeDecay(
            f(0.1), decay_steps=100, decay_rate=f(0.5), staircase=True)),
        ("cosine_decay_restarts", ks.CosineDecayRestarts(
            f(0.1), first_decay_steps=200, t_mul=f(2.0), m_mul=f(0.8),
            alpha=f(0.1))),
        ("cosine_decay_restarts_even", ks.CosineDecayRestarts(
            f(0.1), first_decay_steps=200, t_mul=f(1.0), m_mul=f(1.0),
            alpha=f(0.1))),
    ]
    try:
        scheds.append(("cosine_decay_warmup", ks.CosineDecay(
            initial_learning_rate=f(0.0), decay_steps=1000, alpha=f(0.0),
            warmup_target=f(0.1), warmup_steps=100)))
    except TypeError:  # older Keras without warmup support
        print("CosineDecay has no warmup support; skipping cosine_decay_warmup")
    tensors.append(("sched/steps", np.array(SCHED_STEPS, np.int64)))
    for name, sch in scheds:
        vals = []
        for s in SCHED_STEPS:
            out = sch(np.int64(s))
            assert out.dtype == tf.float64, (name, out.dtype)
            vals.append(float(out.numpy()))
        vals = np.array(vals, np.float64)
        want = np.array([sched_ref(name, s) for s in SCHED_STEPS])
        d = float(np.max(np.abs(vals - want)))
        assert d < 1e-15, (name, d)
        notes.append("sched %s: max|Keras - numpy formula| = %.3g" % (name, d))
        tensors.append(("sched/" + name, vals))

    # legacy TF1 API agrees on the piecewise boundary rule (step == boundary
    # stays in the earlier interval)
    try:
        legacy = []
        for s in SCHED_STEPS:
            r = tf.compat.v1.train.piecewise_constant(
                tf.constant(s, tf.int64), [np.int64(100), np.int64(500)],
                [f(0.1), f(0.01), f(0.001)])
            legacy.append(float(r() if callable(r) else r))
        same = legacy == [sched_ref("piecewise_constant", s) for s in SCHED_STEPS]
        notes.append("tf.compat.v1.train.piecewise_constant agrees: %s" % same)
    except Exception as e:  # noqa: BLE001
        notes.append("tf.compat.v1.train.piecewise_constant unavailable (%s)"
                     % type(e).__name__)

    comment = """\
Generated by scripts/golden/ema_schedules.py (numpy seed %d).
EMA (f32): tf.compat.v1.train.ExponentialMovingAverage(decay=ema/decay=0.99).
  v = tf.Variable(ema/init); the shadow is created by a first apply() while
  v == ema/init, so shadow_0 = ema/init. Then for k = 1..10:
  v.assign(ema/values[k-1]); num_updates counter := k; ema.apply([v]);
  row k-1 of ema/shadow_* = shadow after that apply.
  Update (TF source, training/moving_averages.py, all in float32):
    d = decay                                       (ema/shadow_plain)
    d = min(decay, (1 + n) / (10 + n)), n = k        (ema/shadow_num_updates)
    shadow -= (shadow - v) * (1 - d)   (zero_debias=False for Variables)
  so with num_updates d = 2/11, 3/12, ..., 11/20 for k = 1..10 (all < 0.99).
Schedules (f64; Keras %s, keras.optimizers.schedules, evaluated in float64
  at integer steps sched/steps; formulas confirmed from the Keras source):
  exponential_decay:  0.1 * 0.5^(step/100)             (no clamping)
  exponential_decay_staircase: 0.1 * 0.5^floor(step/100)
  piecewise_constant: boundaries [100, 500], values [0.1, 0.01, 0.001]:
    step <= 100 -> 0.1; 100 < step <= 500 -> 0.01; step > 500 -> 0.001
    (step == boundary stays in the EARLIER interval; so step 100 -> 0.1,
    step 101 -> 0.01)
  cosine_decay: s = min(step, 1000);
    0.1 * ((1 - alpha) * 0.5 * (1 + cos(pi * s / 1000)) + alpha), alpha=0.05
  cosine_decay_warmup: init=0, warmup_target=0.1, warmup_steps=100,
    decay_steps=1000, alpha=0:
    s = min(step, warmup_steps + decay_steps)
    s < warmup_steps:  init + (warmup_target - init) * s / warmup_steps
    otherwise:         warmup_target * ((1-alpha) * 0.5 *
                         (1 + cos(pi * (s - warmup_steps) / decay_steps)) + alpha)
    (step == warmup_steps is already in the cosine branch and equals
    warmup_target; the total schedule spans warmup_steps + decay_steps.)
  polynomial_decay: decay_steps=1000, end_learning_rate=0.001, power=0.5:
    (0.1 - end) * (1 - min(step, 1000) / 1000)^power + end
  polynomial_decay_cycle: decay_steps=300, end=0.01, power=2, cycle: the
    decay steps are 300 * ceil(step / 300) (1 at step 0), step unclamped
  inverse_time_decay(_staircase): decay_steps=100, decay_rate=0.5:
    0.1 / (1 + 0.5 * p), p = step / 100 (floored with staircase)
  cosine_decay_restarts: first_decay_steps=200, t_mul=2, m_mul=0.8,
    alpha=0.1 (SGDR): c = step / 200; i = floor(log(1 - c (1 - t_mul)) /
    log(t_mul)); c = (c - (1 - t_mul^i) / (1 - t_mul)) / t_mul^i;
    0.1 * ((1 - alpha) * 0.5 * m_mul^i * (1 + cos(pi c)) + alpha);
    _even: t_mul=1, m_mul=1: i = floor(c), c -= i
Checks:
""" % (SEED, tf.keras.__version__ if hasattr(tf.keras, "__version__") else "?")
    write_golden("ema_schedules.txt", tensors, comment, notes)


if __name__ == "__main__":
    main()
