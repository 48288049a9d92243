"""Generate golden values for NN ops with TensorFlow.

Writes tests/golden/nn_ops.txt (all float32 except labels / int params):
  * sparse softmax cross-entropy (loss and gradient of sum(loss * upstream)),
  * softmax / log_softmax of the cross-entropy logits,
  * conv2d (NHWC input, HWIO filter) forward + dx/dw for SAME/VALID, strides
    1/2, including even kernels (asymmetric SAME padding),
  * max_pool2d forward + dx for several ksize/stride/padding combinations.

Every TF result is also checked against an independent float64 NumPy reference
(asserting the padding conventions); the max abs differences are recorded in
the file's comments.

Run from the repository root:
    python3 scripts/golden/nn_ops.py
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_io import write_golden  # noqa: E402

SEED = 20240601


def f32(a):
    return np.asarray(a, dtype=np.float64).astype(np.float32)


def same_pads(n, k, s):
    """TF SAME padding along one dim: (out, pad_before, pad_after)."""
    out = -(-n // s)
    total = max((out - 1) * s + k - n, 0)
    return out, total // 2, total - total // 2


def conv2d_ref(x, w, s, same):
    """float64 reference: y, and dx/dw of sum(y * dy) via a closure."""
    x = x.astype(np.float64)
    w = w.astype(np.float64)
    n, h, wd, c = x.shape
    kh, kw, _, o = w.shape
    if same:
        oh, pt, pb = same_pads(h, kh, s)
        ow, pl, pr = same_pads(wd, kw, s)
    else:
        oh, pt, pb = (h - kh) // s + 1, 0, 0
        ow, pl, pr = (wd - kw) // s + 1, 0, 0
    xp = np.pad(x, ((0, 0), (pt, pb), (pl, pr), (0, 0)))
    y = np.zeros((n, oh, ow, o))
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, i * s:i * s + kh, j * s:j * s + kw, :]
            y[:, i, j, :] = np.einsum("nhwc,hwco->no", patch, w)

    def grads(dy):
        dy = dy.astype(np.float64)
        dxp = np.zeros_like(xp)
        dw = np.zeros_like(w)
        for i in range(oh):
            for j in range(ow):
                patch = xp[:, i * s:i * s + kh, j * s:j * s + kw, :]
                g = dy[:, i, j, :]
                dw += np.einsum("nhwc,no->hwco", patch, g)
                dxp[:, i * s:i * s + kh, j * s:j * s + kw, :] += np.einsum(
                    "no,hwco->nhwc", g, w)
        dx = dxp[:, pt:pt + h, pl:pl + wd, :]
        return dx, dw

    return y, grads


def maxpool_ref(x, k, s, same):
    x = x.astype(np.float64)
    n, h, wd, c = x.shape
    if same:
        oh, pt, _ = same_pads(h, k, s)
        ow, pl, _ = same_pads(wd, k, s)
    else:
        oh, pt = (h - k) // s + 1, 0
        ow, pl = (wd - k) // s + 1, 0
    y = np.zeros((n, oh, ow, c))
    arg = {}
    for b in range(n):
        for i in range(oh):
            for j in range(ow):
                for ch in range(c):
                    best, bi = -np.inf, None
                    for di in range(k):
                        for dj in range(k):
                            r, q = i * s - pt + di, j * s - pl + dj
                            if 0 <= r < h and 0 <= q < wd and x[b, r, q, ch] > best:
                                best, bi = x[b, r, q, ch], (b, r, q, ch)
                    y[b, i, j, ch] = best
                    arg[(b, i, j, ch)] = bi

    def grads(dy):
        dx = np.zeros_like(x)
        for key, idx in arg.items():
            dx[idx] += dy[key]
        return dx

    return y, grads


def maxdiff(a, b):
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


def main():
    rng = np.random.default_rng(SEED)
    tensors = []
    notes = []

    # ---------------- sparse softmax cross-entropy ----------------
    logits = rng.normal(size=(5, 7)) * 3.0
    logits[2] += 50.0            # large common offset: stability test
    logits[4] = logits[4] * 10.0  # wide spread: very large / tiny losses
    logits = f32(logits)
    labels = rng.integers(0, 7, size=(5,)).astype(np.int64)
    upstream = f32(rng.normal(size=(5,)))
    lt = tf.constant(logits)
    with tf.GradientTape() as tape:
        tape.watch(lt)
        loss = tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=tf.constant(labels), logits=lt)
        obj = tf.reduce_sum(loss * tf.constant(upstream))
    grad = tape.gradient(obj, lt).numpy()
    loss = loss.numpy()
    # reference
    l64 = logits.astype(np.float64)
    lse = np.log(np.sum(np.exp(l64 - l64.max(1, keepdims=True)), 1)) + l64.max(1)
    ref_loss = lse - l64[np.arange(5), labels]
    sm = np.exp(l64 - lse[:, None])
    onehot = np.eye(7)[labels]
    ref_grad = upstream.astype(np.float64)[:, None] * (sm - onehot)
    notes.append("xent: max|loss-ref64|=%.3g max|grad-ref64|=%.3g"
                 % (maxdiff(loss, ref_loss), maxdiff(grad, ref_grad)))
    assert maxdiff(loss, ref_loss) < 1e-4 and maxdiff(grad, ref_grad) < 1e-5
    tensors += [("xent/logits", logits), ("xent/labels", labels),
                ("xent/loss", loss.astype(np.float32)),
                ("xent/upstream", upstream),
                ("xent/grad_logits", grad.astype(np.float32))]

    # ---------------- softmax / log_softmax ----------------
    sm_tf = tf.nn.softmax(lt, axis=-1).numpy()
    lsm_tf = tf.nn.log_softmax(lt, axis=-1).numpy()
    notes.append("softmax: max|y-ref64|=%.3g; log_softmax: max|y-ref64|=%.3g"
                 % (maxdiff(sm_tf, sm), maxdiff(lsm_tf, l64 - lse[:, None])))
    tensors += [("softmax/y", sm_tf), ("log_softmax/y", lsm_tf)]

    # ---------------- conv2d ----------------
    conv_cases = [
        ("conv2d_same_s1", "SAME", 1, (2, 7, 6, 3), (3, 3, 3, 4)),
        ("conv2d_same_s2", "SAME", 2, (2, 7, 6, 3), (3, 3, 3, 4)),
        ("conv2d_valid_s1", "VALID", 1, (2, 7, 6, 3), (3, 3, 3, 4)),
        ("conv2d_valid_s2", "VALID", 2, (2, 7, 6, 3), (3, 3, 3, 4)),
        ("conv2d_same_s1_k5", "SAME", 1, (2, 8, 8, 2), (5, 5, 2, 3)),
        ("conv2d_same_s2_k4", "SAME", 2, (1, 9, 8, 2), (4, 4, 2, 2)),
    ]
    for prefix, pad, s, xs, ws in conv_cases:
        x = f32(rng.normal(size=xs))
        w = f32(rng.normal(size=ws) * 0.5)
        xt, wt = tf.constant(x), tf.constant(w)
        with tf.GradientTape(persistent=True) as tape:
            tape.watch([xt, wt])
            y = tf.nn.conv2d(xt, wt, strides=s, padding=pad)
        dy = f32(rng.normal(size=y.shape))
        with tape:
            obj = tf.reduce_sum(y * tf.constant(dy))
        dx, dw = tape.gradient(obj, [xt, wt])
        del tape
        y, dx, dw = y.numpy(), dx.numpy(), dw.numpy()
        ry, rg = conv2d_ref(x, w, s, pad == "SAME")
        rdx, rdw = rg(dy)
        assert ry.shape == y.shape, (prefix, ry.shape, y.shape)
        d = (maxdiff(y, ry), maxdiff(dx, rdx), maxdiff(dw, rdw))
        assert max(d) < 1e-4, (prefix, d)
        notes.append("%s: y%s max|diff vs ref64| y=%.3g dx=%.3g dw=%.3g"
                     % (prefix, list(y.shape), d[0], d[1], d[2]))
        tensors += [(prefix + "/x", x), (prefix + "/w", w), (prefix + "/y", y),
                    (prefix + "/dy", dy), (prefix + "/dx", dx),
                    (prefix + "/dw", dw),
                    (prefix + "/stride", np.array(s, np.int64)),
                    (prefix + "/same", np.array(int(pad == "SAME"), np.int64))]

    # ---------------- max_pool2d ----------------
    pool_cases = [
        ("maxpool_k2_s2_valid", 2, 2, "VALID"),
        ("maxpool_k3_s2_same", 3, 2, "SAME"),
        ("maxpool_k3_s1_same", 3, 1, "SAME"),
        ("maxpool_k2_s2_same", 2, 2, "SAME"),
    ]
    shape = (2, 7, 7, 3)
    nel = int(np.prod(shape))
    for prefix, k, s, pad in pool_cases:
        # distinct values (multiples of 1/16, exact in f32) -> no ties
        x = f32((rng.permutation(nel) - nel / 2.0) / 16.0).reshape(shape)
        assert len(np.unique(x)) == nel
        xt = tf.constant(x)
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(xt)
            y = tf.nn.max_pool2d(xt, ksize=k, strides=s, padding=pad)
        dy = f32(rng.normal(size=y.shape))
        with tape:
            obj = tf.reduce_sum(y * tf.constant(dy))
        dx = tape.gradient(obj, xt)
        del tape
        y, dx = y.numpy(), dx.numpy()
        ry, rg = maxpool_ref(x, k, s, pad == "SAME")
        assert ry.shape == y.shape
        d = (maxdiff(y, ry), maxdiff(dx, rg(dy)))
        assert max(d) < 1e-5, (prefix, d)
        notes.append("%s: y%s max|diff vs ref64| y=%.3g dx=%.3g"
                     % (prefix, list(y.shape), d[0], d[1]))
        tensors += [(prefix + "/x", x), (prefix + "/y", y),
                    (prefix + "/dy", dy), (prefix + "/dx", dx),
                    (prefix + "/ksize", np.array(k, np.int64)),
                    (prefix + "/stride", np.array(s, np.int64)),
                    (prefix + "/same", np.array(int(pad == "SAME"), np.int64))]

    comment = """\
Generated by scripts/golden/nn_ops.py (numpy seed %d).
Inputs: float64 numpy random, cast to float32. All tensors f32 except labels
and the i64 scalar params (stride, ksize, same: 1=SAME 0=VALID).
Layouts: conv/pool input NHWC, conv filter HWIO, square kernels/strides.
xent/loss = tf.nn.sparse_softmax_cross_entropy_with_logits (per example);
xent/grad_logits = d/dlogits sum(loss * xent/upstream)
                 = upstream[i] * (softmax(logits)[i] - onehot(labels[i])).
xent/logits row 2 has +50 offset, row 4 is scaled by 10.
softmax/y, log_softmax/y: of xent/logits over the last axis.
conv dx/dw and pool dx: gradients of sum(y * dy).
SAME padding (conv and pool): out = ceil(in/stride),
  pad_total = max((out-1)*stride + k - in, 0), pad_before = pad_total // 2,
  pad_after = pad_total - pad_before (the extra pad goes at the END/bottom/right).
Max-pool SAME: padded cells never win (behave as -inf).
VALID: out = (in - k) // stride + 1.
Pool inputs have all-distinct values (no ties). For reference, TF's max-pool
gradient tie rule (checked by hand, not stored here): within a window the
gradient goes to the FIRST maximal element in row-major (h, then w) scan order
of the valid (unpadded) cells; overlapping windows accumulate into dx.
TF vs independent float64 numpy reference (confirms the conventions above):
""" % SEED
    write_golden("nn_ops.txt", tensors, comment, notes)


if __name__ == "__main__":
    main()
