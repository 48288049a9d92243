"""A whole training run of a small Keras model, for an end-to-end test.

Writes tests/golden/keras_training.txt: a Keras Sequential model (conv2d with
relu, max pooling, synchronized batch normalization, flatten, dense with
gelu, dense logits) trained with keras.optimizers.SGD(momentum=0.9) on
SparseCategoricalCrossentropy(from_logits=True) for STEPS steps on
consecutive, unshuffled batches of BATCH examples, all float32:
  * x [64, 8, 8, 1], y [64] (i64): the data;
  * init/<variable>: every variable before the first step (Keras's own
    initializers, seeded), under mirrortrain's checkpoint names;
  * final/<variable>: every variable after the last step (batch
    normalization's moving statistics included);
  * loss [STEPS]: each step's mean loss, before its update.
tests/trainer/keras_training_test.cc starts mirrortrain's trainer from
init/* on two replicas and requires final/* after the same steps.

Run from the repository root:
    python3 scripts/golden/keras_training.py
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

SEED = 2121
LR = 0.1
MOMENTUM = 0.9
CNN_EXAMPLES, CNN_BATCH, CNN_STEPS = 64, 16, 8  # two epochs
# The language model: byte windows of LM_LENGTH as the text source cuts
# them (training split: the first LM_TRAIN_BYTES; 16 windows).
LM_LENGTH, LM_BATCH, LM_STEPS = 8, 8, 6  # three epochs
LM_BYTES, LM_FRACTION = 170, 0.2
LM_LR = 0.01
REG_EXAMPLES, REG_FEATURES, REG_BATCH, REG_STEPS = 48, 12, 12, 8
REG_LR, REG_L2, REG_CLIP = 0.01, 0.05, 0.5
RES_EXAMPLES, RES_BATCH, RES_STEPS, RES_LR = 48, 16, 6, 0.05
CLIP_NORM, CLIP_VALUE = 0.05, 0.02
PW_EXAMPLES, PW_BATCH, PW_STEPS, PW_LR = 48, 16, 6, 0.01
DW_EXAMPLES, DW_BATCH, DW_STEPS, DW_LR = 48, 16, 6, 0.01
BIN_SMOOTHING = 0.1


def fresh_session():
    """Keras's auto-name counters from zero, as each mirrortrain model's."""
    keras.backend.clear_session()


def named_variables(model):
    """(mirrortrain checkpoint name, keras variable) for every variable:
    its Keras path without the Sequential model's own name."""
    own = model.name + "/"
    return [(v.path[len(own):] if v.path.startswith(own) else v.path, v)
            for v in model.weights]


def train(model, optimizer, batches, steps, per_epoch, loss_fn=None):
    """`steps` steps on batches(step); returns each step's mean loss (the
    data's: regularization penalties are added to the loss differentiated,
    not to the one returned). loss_fn: SparseCategoricalCrossentropy(
    from_logits=True) when None."""
    if loss_fn is None:
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    trainable = model.trainable_variables
    losses = []
    for step in range(steps):
        xb, yb = batches(step)
        with tf.GradientTape() as tape:
            logits = model(tf.constant(xb), training=True)
            data_loss = loss_fn(tf.constant(yb), logits)
            loss = data_loss + sum(model.losses, tf.constant(0.0))
        # Dense gradients: an Embedding's is a tf.IndexedSlices with a slice
        # per occurrence of an id, and Keras 3's Adam then squares each
        # slice on its own (v gains the sum of g^2 over a repeated id's
        # occurrences, not the square of their sum). TF1's optimizers summed
        # duplicates first (_deduplicate_indexed_slices), as a dense
        # gradient does and as mirrortrain (and PyTorch) do.
        grads = [tf.convert_to_tensor(g) for g in tape.gradient(loss, trainable)]
        optimizer.apply_gradients(zip(grads, trainable))
        losses.append(float(data_loss.numpy()))
    # It learns: the last epoch's batches cost less than the first's.
    assert sum(losses[-per_epoch:]) < sum(losses[:per_epoch]), losses
    return losses


def record(prefix, model, run):
    """init/*, final/* and loss of `model` trained by run()."""
    named = named_variables(model)
    init = [(prefix + "init/" + name, v.numpy().astype(np.float32))
            for name, v in named]
    losses = run()
    final = [(prefix + "final/" + name, v.numpy().astype(np.float32))
             for name, v in named]
    return init + final + [(prefix + "loss",
                            np.array(losses, dtype=np.float32))]


def cnn(rng):
    # Classes a small net can tell apart: a bright 3x3 patch whose place
    # is the label, on noise.
    y = rng.integers(0, 10, size=CNN_EXAMPLES).astype(np.int64)
    x = rng.uniform(0.0, 0.4, size=(CNN_EXAMPLES, 8, 8, 1)).astype(np.float32)
    for i, label in enumerate(y):
        r, c = 2 * (label // 4), 2 * (label % 4)
        x[i, r:r + 3, c:c + 3, 0] += 0.6
    fresh_session()
    keras.utils.set_random_seed(SEED)
    model = keras.Sequential([
        keras.Input((8, 8, 1)),
        keras.layers.Conv2D(4, 3, padding="same", activation="relu",
                            name="conv2d"),
        keras.layers.MaxPooling2D(2, name="max_pooling2d"),
        keras.layers.BatchNormalization(synchronized=True,
                                        name="batch_normalization"),
        keras.layers.Flatten(name="flatten"),
        keras.layers.Dense(16, activation="gelu", name="dense"),
        keras.layers.Dense(10, name="dense_1"),
    ])

    batches = consecutive_batches(x, y, CNN_BATCH)

    optimizer = keras.optimizers.SGD(learning_rate=LR, momentum=MOMENTUM)
    return [("cnn/x", x), ("cnn/y", y)] + record(
        "cnn/", model, lambda: train(model, optimizer, batches, CNN_STEPS,
                                    CNN_EXAMPLES // CNN_BATCH))


def language_model(rng):
    # Words from a small vocabulary, so the next byte is often predictable.
    words = [b"the ", b"cat ", b"sat ", b"on ", b"a ", b"mat. "]
    text = b""
    while len(text) < LM_BYTES:
        text += words[rng.integers(0, len(words))]
    text = np.frombuffer(text[:LM_BYTES], dtype=np.uint8)
    train_bytes = LM_BYTES - int(np.floor(LM_BYTES * LM_FRACTION))
    windows = (train_bytes - 1) // LM_LENGTH
    inputs = np.stack([text[i * LM_LENGTH:(i + 1) * LM_LENGTH]
                       for i in range(windows)]).astype(np.int32)
    targets = np.stack([text[i * LM_LENGTH + 1:(i + 1) * LM_LENGTH + 1]
                        for i in range(windows)]).astype(np.int64)
    fresh_session()
    keras.utils.set_random_seed(SEED + 1)
    ids = keras.Input((LM_LENGTH,), dtype="int32")
    x = keras.layers.Embedding(256, 8, name="embedding")(ids)
    attended = keras.layers.MultiHeadAttention(
        num_heads=2, key_dim=4, name="multi_head_attention")(
            x, x, use_causal_mask=True)
    x = keras.layers.Add()([x, attended])
    x = keras.layers.LayerNormalization(epsilon=1e-3,
                                        name="layer_normalization")(x)
    logits = keras.layers.Dense(256, name="dense")(x)
    model = keras.Model(ids, logits)

    batches = consecutive_batches(inputs, targets, LM_BATCH)

    optimizer = keras.optimizers.Adam(learning_rate=LM_LR)
    return [("lm/text", text.astype(np.int64))] + record(
        "lm/", model, lambda: train(model, optimizer, batches, LM_STEPS,
                                   windows // LM_BATCH))


def mlp_data(rng):
    """REG_EXAMPLES points of REG_FEATURES and the 4 classes of a random
    linear map of them."""
    x = rng.normal(size=(REG_EXAMPLES, REG_FEATURES)).astype(np.float32)
    w = rng.normal(size=(REG_FEATURES, 4))
    return x, np.argmax(x @ w, axis=1).astype(np.int64)


def consecutive_batches(x, y, batch):
    """Step k's batch: the next `batch` rows, from the top each epoch (the
    trainer's unshuffled batches)."""
    def batches(step):
        first = (step * batch) % len(x)
        return x[first:first + batch], y[first:first + batch]
    return batches


def regularized(rng):
    """An MLP under RMSprop with L2 on its kernels and gradients clipped by
    their global norm (the penalty's gradient included, as Keras clips)."""
    x, y = mlp_data(rng)
    fresh_session()
    keras.utils.set_random_seed(SEED + 2)
    # mirrortrain's l2_regularization adds l2 * w to a kernel's gradient:
    # Keras's L2(l2 / 2) penalty.
    l2 = keras.regularizers.L2(REG_L2 / 2)
    model = keras.Sequential([
        keras.Input((REG_FEATURES,)),
        # A named layer takes no auto-name number: the next is "dense".
        keras.layers.Dense(16, activation="relu", kernel_regularizer=l2,
                           name="hidden"),
        keras.layers.Dense(4, kernel_regularizer=l2),
    ])
    optimizer = keras.optimizers.RMSprop(learning_rate=REG_LR,
                                         global_clipnorm=REG_CLIP)
    return [("reg/x", x), ("reg/y", y)] + record(
        "reg/", model,
        lambda: train(model, optimizer, consecutive_batches(x, y, REG_BATCH), REG_STEPS,
                      REG_EXAMPLES // REG_BATCH))


def clipped(rng, name, optimizer, seed):
    """An MLP (16 relu, 4) under `optimizer`, which clips each gradient."""
    x, y = mlp_data(rng)
    fresh_session()
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([
        keras.Input((REG_FEATURES,)),
        keras.layers.Dense(16, activation="relu"),
        keras.layers.Dense(4),
    ])
    prefix = name + "/"
    return [(prefix + "x", x), (prefix + "y", y)] + record(
        prefix, model,
        lambda: train(model, optimizer, consecutive_batches(x, y, REG_BATCH), REG_STEPS,
                      REG_EXAMPLES // REG_BATCH))


def binary(rng, name, labels, output, loss_fn, optimizer, seed):
    """An MLP (16 relu, then the layer output() makes, after the session's
    names restart) trained with `loss_fn` on 0/1 labels:
    [n] (binary) or [n, labels] (multi-label), the signs of random linear
    maps of the points."""
    x = rng.normal(size=(REG_EXAMPLES, REG_FEATURES)).astype(np.float32)
    w = rng.normal(size=(REG_FEATURES, labels))
    y = (x @ w > 0).astype(np.int64)
    if labels == 1:
        y = y[:, 0]
    fresh_session()
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([
        keras.Input((REG_FEATURES,)),
        keras.layers.Dense(16, activation="relu"),
        output(),
    ])
    prefix = name + "/"
    return [(prefix + "x", x), (prefix + "y", y)] + record(
        prefix, model,
        lambda: train(model, optimizer, consecutive_batches(x, y, REG_BATCH),
                      REG_STEPS, REG_EXAMPLES // REG_BATCH, loss_fn))


def small_run(name, x, y, model, optimizer, loss_fn=None):
    """The run `name` of `model` on x, y: REG_STEPS steps of REG_BATCH
    consecutive examples under `optimizer` (and `loss_fn`, train()'s),
    recorded with its data."""
    return [(name + "/x", x), (name + "/y", y)] + record(
        name + "/", model,
        lambda: train(model, optimizer, consecutive_batches(x, y, REG_BATCH),
                      REG_STEPS, REG_EXAMPLES // REG_BATCH, loss_fn))


def sequence_data(rng, steps, window=slice(None)):
    """Sequences x [REG_EXAMPLES, steps, 4] and four classes y: the sign
    pattern of two random projections of the mean over the `window` of
    steps."""
    x = rng.normal(size=(REG_EXAMPLES, steps, 4)).astype(np.float32)
    w = rng.normal(size=(4, 2))
    y = ((x[:, window].mean(axis=1) @ w > 0) @ np.array([1, 2])).astype(
        np.int64)
    return x, y


def sequences(rng):
    """Conv1D layers (causal, then same with strides) on sequences [n, 10,
    4], classes the sign pattern of two random projections of the mean."""
    x, y = sequence_data(rng, 10)
    fresh_session()
    keras.utils.set_random_seed(SEED + 8)
    L = keras.layers
    model = keras.Sequential([
        keras.Input((10, 4)),
        L.Conv1D(6, 3, padding="causal", activation="relu"),
        L.Conv1D(4, 3, strides=2, padding="same"),
        L.Flatten(),
        L.Dense(4),
    ])
    optimizer = keras.optimizers.Adam(learning_rate=0.01)
    return small_run("seq", x, y, model, optimizer)


def mobile(rng):
    """MobileNetV2's and DeepLab's pieces: asymmetric zero padding before a
    strided valid depthwise conv, a grouped pointwise conv, a dilated conv
    and an asymmetric crop, on images [n, 8, 8, 3]."""
    x = rng.normal(size=(REG_EXAMPLES, 8, 8, 3)).astype(np.float32)
    y = (x.mean(axis=(1, 2)) @ rng.normal(size=(3, 4))).argmax(1).astype(
        np.int64)
    fresh_session()
    keras.utils.set_random_seed(SEED + 14)
    L = keras.layers
    model = keras.Sequential([
        keras.Input((8, 8, 3)),
        L.Conv2D(8, 3, padding="same", activation="relu"),
        L.ZeroPadding2D(((0, 1), (0, 1))),
        L.DepthwiseConv2D(3, strides=2, activation="relu"),
        L.Conv2D(8, 1, groups=2),
        L.Conv2D(6, 3, dilation_rate=2, padding="same", activation="relu"),
        L.Cropping2D(((1, 0), (0, 1))),
        L.GlobalAveragePooling2D(),
        L.Dense(4),
    ])
    optimizer = keras.optimizers.Adam(learning_rate=0.01)
    return small_run("mobile", x, y, model, optimizer)


def wave(rng):
    """WaveNet's stack: causal Conv1D at dilations 1, 2 (grouped) and 4,
    then a crop of the first steps, on sequences [n, 12, 4]."""
    x, y = sequence_data(rng, 12)
    fresh_session()
    keras.utils.set_random_seed(SEED + 15)
    L = keras.layers
    model = keras.Sequential([
        keras.Input((12, 4)),
        L.Conv1D(6, 2, padding="causal", activation="relu"),
        L.Conv1D(6, 2, padding="causal", dilation_rate=2, groups=2,
                 activation="relu"),
        L.Conv1D(4, 2, padding="causal", dilation_rate=4),
        L.Cropping1D((4, 0)),
        L.ZeroPadding1D((0, 1)),
        L.Flatten(),
        L.Dense(4),
    ])
    optimizer = keras.optimizers.Adam(learning_rate=0.01)
    return small_run("wave", x, y, model, optimizer)


def recurrent(rng):
    """An LSTM (every step's output), then a GRU (the last of a backward
    pass) on sequences [n, 10, 4]."""
    x, y = sequence_data(rng, 10, slice(None, 3))
    fresh_session()
    keras.utils.set_random_seed(SEED + 16)
    L = keras.layers
    model = keras.Sequential([
        keras.Input((10, 4)),
        L.LSTM(8, return_sequences=True),
        L.GRU(6, go_backwards=True),
        L.Dense(4),
    ])
    optimizer = keras.optimizers.Adam(learning_rate=0.01)
    return small_run("rnn", x, y, model, optimizer)


def bidirectional(rng):
    """Bidirectional LSTM (every step, concatenated) then Bidirectional GRU
    (the last outputs, summed) on sequences [n, 10, 4]."""
    x, y = sequence_data(rng, 10, slice(-3, None))
    fresh_session()
    keras.utils.set_random_seed(SEED + 17)
    L = keras.layers
    model = keras.Sequential([
        keras.Input((10, 4)),
        L.Bidirectional(L.LSTM(5, return_sequences=True)),
        L.Bidirectional(L.GRU(3), merge_mode="sum"),
        L.Dense(4),
    ])
    optimizer = keras.optimizers.Adam(learning_rate=0.01)
    return small_run("birnn", x, y, model, optimizer)


def seq2seq(rng):
    """An encoder LSTM's last state repeated over 3 steps for a decoder LSTM,
    a class per output step (labels [n, 3]), on sequences [n, 10, 4]."""
    x = rng.normal(size=(REG_EXAMPLES, 10, 4)).astype(np.float32)
    w = rng.normal(size=(4, 3))
    y = (x[:, :3] @ w).argmax(-1).astype(np.int64)  # [n, 3]
    fresh_session()
    keras.utils.set_random_seed(SEED + 18)
    L = keras.layers
    model = keras.Sequential([
        keras.Input((10, 4)),
        L.LSTM(8),
        L.RepeatVector(3),
        L.LSTM(6, return_sequences=True),
        L.Dense(3),
    ])
    optimizer = keras.optimizers.Adam(learning_rate=0.01)
    return small_run("s2s", x, y, model, optimizer)


def regression(rng, name, targets, loss_fn, optimizer, seed, offsets=0.0,
               straddles=None):
    """An MLP (16 relu, then `targets` linear outputs) fitting real-valued
    targets (a random linear map of the points, plus noise and `offsets`)
    under `loss_fn`; y [n] for one target. With `straddles`, asserts that
    the errors lie on both sides of it at the start and at the end."""
    x = rng.normal(size=(REG_EXAMPLES, REG_FEATURES)).astype(np.float32)
    w = rng.normal(size=(REG_FEATURES, targets))
    y = (x @ w + 0.1 * rng.normal(size=(REG_EXAMPLES, targets)) +
         offsets).astype(np.float32)
    if targets == 1:
        y = y[:, 0]
    fresh_session()
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([
        keras.Input((REG_FEATURES,)),
        keras.layers.Dense(16, activation="relu"),
        keras.layers.Dense(targets),
    ])
    prefix = name + "/"

    def errors():
        """|output - target| over the examples."""
        return np.abs(model(x, training=False).numpy().reshape(y.shape) - y)

    def gap():
        """The smallest |output - target| over the examples."""
        return float(errors().min())

    def check_straddles():
        if straddles is not None:
            e = errors()
            assert (e < straddles).any() and (e > straddles).any(), name

    check_straddles()
    before = gap()
    out = [(prefix + "x", x), (prefix + "y", y)] + record(
        prefix, model,
        lambda: train(model, optimizer, consecutive_batches(x, y, REG_BATCH),
                      REG_STEPS, REG_EXAMPLES // REG_BATCH, loss_fn))
    if np.any(offsets):
        # No output near its target at the start or the end (a straight
        # path between: the steps are small).
        assert min(before, gap()) > 2.0, (before, gap())
    check_straddles()
    return out


def concatenated(rng):
    """Branches concatenated along the channels: DenseNet's block (a conv's
    output beside its input) and two branches (a pointwise dense, a 1x1
    conv), as config type `concatenate` builds them."""
    x = rng.normal(size=(REG_EXAMPLES, 6, 6, 2)).astype(np.float32)
    y = (x.mean(axis=(1, 2)) @ rng.normal(size=(2, 4))).argmax(1).astype(
        np.int64)
    fresh_session()
    keras.utils.set_random_seed(SEED + 11)
    L = keras.layers
    inputs = keras.Input((6, 6, 2))
    h = L.Conv2D(4, 3, padding="same", activation="relu")(inputs)
    h = L.Concatenate()([L.Conv2D(3, 3, padding="same", activation="relu")(h),
                         h])
    h = L.Concatenate()([L.Dense(5)(h), L.Conv2D(2, 1)(h)])
    h = L.GlobalAveragePooling2D()(h)
    model = keras.Model(inputs, L.Dense(4)(h))
    optimizer = keras.optimizers.Adam(learning_rate=0.01)
    return small_run("cat", x, y, model, optimizer)


def segmentation(rng):
    """A small U-Net: per-pixel classes (labels [n, 8, 8]) from a conv, a
    skip connection concatenating the full-resolution features with a
    pooled, convolved and up-sampled branch (zero padding before its conv),
    and a 1x1 conv of logits per pixel."""
    x = rng.uniform(size=(REG_EXAMPLES, 8, 8, 1)).astype(np.float32)
    y = np.digitize(x[..., 0], [0.33, 0.66]).astype(np.int64)
    fresh_session()
    keras.utils.set_random_seed(SEED + 12)
    L = keras.layers
    inputs = keras.Input((8, 8, 1))
    h = L.Conv2D(4, 3, padding="same", activation="relu")(inputs)
    down = L.MaxPooling2D(2)(h)
    down = L.ZeroPadding2D(1)(down)
    down = L.Conv2D(4, 3, activation="relu")(down)
    up = L.UpSampling2D(2)(down)
    h = L.Concatenate()([up, h])
    model = keras.Model(inputs, L.Conv2D(3, 1)(h))
    optimizer = keras.optimizers.Adam(learning_rate=0.01)
    return small_run("unet", x, y, model, optimizer)


def decoder(rng):
    """An encoder-decoder for per-pixel classes (labels [n, 8, 8], as
    unet's): a strided valid conv down to 3x3, then transposed convs up:
    strided same with output_padding (5x5), valid with a 4x4 kernel (8x8),
    and 1x1 logits per pixel."""
    x = rng.uniform(size=(REG_EXAMPLES, 8, 8, 1)).astype(np.float32)
    y = np.digitize(x[..., 0], [0.33, 0.66]).astype(np.int64)
    fresh_session()
    keras.utils.set_random_seed(SEED + 19)
    L = keras.layers
    model = keras.Sequential([
        keras.Input((8, 8, 1)),
        L.Conv2D(4, 3, strides=2, activation="relu"),
        L.Conv2DTranspose(6, 3, strides=2, padding="same", output_padding=0,
                          activation="relu"),
        L.Conv2DTranspose(4, 4, activation="relu"),
        L.Conv2DTranspose(3, 1),
    ])
    optimizer = keras.optimizers.Adam(learning_rate=0.01)
    return small_run("deconv", x, y, model, optimizer)


def merges(rng):
    """Keras's elementwise merges of two branches on images [n, 8, 8, 3]:
    a squeeze-and-excitation gate (Multiply of the image and a sigmoid of
    its pooled channels, broadcast over the pixels), Maximum of a conv and
    the identity, Average of a 1x1 conv and the identity, Subtract of a
    dense layer and the identity, Minimum of a conv and a tanh branch."""
    x = rng.normal(size=(REG_EXAMPLES, 8, 8, 3)).astype(np.float32)
    y = (x.mean(axis=(1, 2)) @ rng.normal(size=(3, 4))).argmax(1).astype(
        np.int64)
    fresh_session()
    keras.utils.set_random_seed(SEED + 20)
    L = keras.layers
    inputs = keras.Input((8, 8, 3))
    h = L.Conv2D(8, 3, padding="same", activation="relu")(inputs)
    s = L.GlobalAveragePooling2D(keepdims=True)(h)
    s = L.Conv2D(4, 1, activation="relu")(s)
    s = L.Conv2D(8, 1, activation="sigmoid")(s)
    h = L.Multiply()([s, h])
    h = L.Maximum()([L.Conv2D(8, 3, padding="same")(h), h])
    h = L.Average()([L.Conv2D(8, 1)(h), h])
    h = L.Subtract()([L.Dense(8)(h), h])
    h = L.Minimum()([L.Conv2D(8, 3, padding="same")(h),
                     L.Activation("tanh")(h)])
    h = L.GlobalAveragePooling2D()(h)
    model = keras.Model(inputs, L.Dense(4)(h))
    optimizer = keras.optimizers.Adam(learning_rate=0.01)
    return small_run("merge", x, y, model, optimizer)


def atrous(rng):
    """DeepLab's decoder in small: per-pixel classes (labels [n, 8, 8], as
    unet's) from a strided conv, a dilated conv, per-pixel logits at a
    quarter of the resolution, and bilinear up-sampling back (4x)."""
    x = rng.uniform(size=(REG_EXAMPLES, 8, 8, 1)).astype(np.float32)
    y = np.digitize(x[..., 0], [0.33, 0.66]).astype(np.int64)
    fresh_session()
    keras.utils.set_random_seed(SEED + 21)
    L = keras.layers
    model = keras.Sequential([
        keras.Input((8, 8, 1)),
        L.Conv2D(6, 3, strides=2, padding="same", activation="relu"),
        L.Conv2D(6, 3, dilation_rate=2, padding="same", activation="relu"),
        L.Conv2D(3, 1, strides=2),
        L.UpSampling2D(4, interpolation="bilinear"),
    ])
    optimizer = keras.optimizers.Adam(learning_rate=0.01)
    return small_run("atrous", x, y, model, optimizer)


def simple_recurrent(rng):
    """Bidirectional SimpleRNN (every step, averaged) then a SimpleRNN (the
    last output) on sequences [n, 10, 4]."""
    x, y = sequence_data(rng, 10, slice(2, 6))
    fresh_session()
    keras.utils.set_random_seed(SEED + 22)
    L = keras.layers
    model = keras.Sequential([
        keras.Input((10, 4)),
        L.Bidirectional(L.SimpleRNN(6, return_sequences=True),
                        merge_mode="ave"),
        L.SimpleRNN(5),
        L.Dense(4),
    ])
    optimizer = keras.optimizers.Adam(learning_rate=0.01)
    return small_run("srnn", x, y, model, optimizer)


def conformer(rng):
    """Conformer's convolution module in small, on sequences [n, 10, 4]: a
    pointwise Conv1D, a depthwise Conv1D, layer normalization, swish, then
    a strided SeparableConv1D, Flatten and Dense."""
    x, y = sequence_data(rng, 10, slice(3, 7))
    fresh_session()
    keras.utils.set_random_seed(SEED + 23)
    L = keras.layers
    model = keras.Sequential([
        keras.Input((10, 4)),
        L.Conv1D(8, 1),
        L.DepthwiseConv1D(3, padding="same"),
        L.LayerNormalization(epsilon=1e-3),
        L.Activation("swish"),
        L.SeparableConv1D(6, 3, strides=2, padding="same",
                          depth_multiplier=2),
        L.Flatten(),
        L.Dense(4),
    ])
    optimizer = keras.optimizers.Adam(learning_rate=0.01)
    return small_run("conformer", x, y, model, optimizer)


def video(rng):
    """A CNN-LSTM over clips [n, 4, 6, 6, 1]: TimeDistributed(Conv2D),
    TimeDistributed(BatchNormalization) (each frame by its own batch
    statistics, the moving ones updated per frame, as Keras 3 calls the
    layer per step) and TimeDistributed(GlobalAveragePooling2D) per frame,
    then an LSTM over the frames' features."""
    x = rng.normal(size=(REG_EXAMPLES, 4, 6, 6, 1)).astype(np.float32)
    y = ((x[:, 1:3].mean(axis=(1, 2, 3, 4)) > 0) * 2 +
         (x[:, :, :3].mean(axis=(1, 2, 3, 4)) > 0)).astype(np.int64)
    fresh_session()
    keras.utils.set_random_seed(SEED + 24)
    L = keras.layers
    model = keras.Sequential([
        keras.Input((4, 6, 6, 1)),
        L.TimeDistributed(L.Conv2D(4, 3, activation="relu")),
        L.TimeDistributed(L.BatchNormalization()),
        L.TimeDistributed(L.GlobalAveragePooling2D()),
        L.LSTM(6),
        L.Dense(4),
    ])
    optimizer = keras.optimizers.Adam(learning_rate=0.01)
    return small_run("video", x, y, model, optimizer)


def padded_ids(rng, steps, vocabulary, shortest):
    """Token ids [REG_EXAMPLES, steps] in [1, vocabulary), each row's
    length drawn from [shortest, steps], the rest 0 (padding): right-padded
    rows, and every fourth one left-padded."""
    x = rng.integers(1, vocabulary, size=(REG_EXAMPLES, steps))
    lengths = rng.integers(shortest, steps + 1, size=REG_EXAMPLES)
    for i, n in enumerate(lengths):
        if i % 4 == 3:
            x[i, :steps - n] = 0
        else:
            x[i, n:] = 0
    return x.astype(np.float32), lengths


def output_masked(model, x):
    """Whether Keras attaches a mask to the model's output (its losses then
    weigh the labels by it)."""
    return getattr(model(x[:2]), "_keras_mask", None) is not None


def masked_text(rng):
    """Padded token ids (mask_zero) through an LSTM (every step) and a GRU
    (the last unmasked step's state), four classes from the ids."""
    x, lengths = padded_ids(rng, 10, 20, 3)
    big = ((x > 10).sum(axis=1) * 2 > lengths)
    y = (big * 2 + (x.sum(axis=1) % 2 == 1)).astype(np.int64)
    fresh_session()
    keras.utils.set_random_seed(SEED + 25)
    L = keras.layers
    model = keras.Sequential([
        keras.Input((10,)),
        L.Embedding(20, 6, mask_zero=True),
        L.LSTM(8, return_sequences=True),
        L.GRU(5),
        L.Dense(4),
    ])
    assert not output_masked(model, x)
    optimizer = keras.optimizers.Adam(learning_rate=0.01)
    return small_run("mtext", x, y, model, optimizer)


def tagger_labels(x):
    """A class per token of padded ids x (0 at padding): the token's and
    its left neighbour's residues."""
    ids = x.astype(np.int64)
    return np.where(x == 0, 0,
                    (ids % 3 + np.roll(ids, 1, axis=1) % 2) % 3).astype(
                        np.int64)


def tagger_model(seed):
    """Embedding(16, 6, mask_zero=True), Bidirectional(GRU(4,
    return_sequences=True)), Dense(3), from `seed`."""
    fresh_session()
    keras.utils.set_random_seed(seed)
    L = keras.layers
    return keras.Sequential([
        keras.Input((8,)),
        L.Embedding(16, 6, mask_zero=True),
        L.Bidirectional(L.GRU(4, return_sequences=True)),
        L.Dense(3),
    ])


def tagger(rng):
    """A class per token of padded ids, the loss over the unmasked tokens
    only (Keras's loss masking): Embedding(mask_zero), Bidirectional GRU
    (every step: masked ones give 0), Dense per step."""
    x, _ = padded_ids(rng, 8, 16, 2)
    y = tagger_labels(x)
    model = tagger_model(SEED + 26)
    assert output_masked(model, x)
    optimizer = keras.optimizers.Adam(learning_rate=0.01)
    return small_run("tagger", x, y, model, optimizer)


def masked_attention(rng):
    """A causal self-attention block over padded ids: the padding mask and
    the causal one combined, the attention's output masked like its query,
    x + attention(x) (an OR of two equal masks), layer norm, the mean over
    the unmasked steps."""
    x, lengths = padded_ids(rng, 8, 16, 3)
    y = ((x[:, :3].sum(axis=1) > 24) * 2 +
         (lengths > 5)).astype(np.int64)
    fresh_session()
    keras.utils.set_random_seed(SEED + 27)
    L = keras.layers
    inputs = keras.Input((8,))
    h = L.Embedding(16, 8, mask_zero=True)(inputs)
    h = L.Add()([h, L.MultiHeadAttention(num_heads=2, key_dim=4)(
        h, h, use_causal_mask=True)])
    h = L.LayerNormalization(epsilon=1e-3)(h)
    h = L.GlobalAveragePooling1D()(h)
    model = keras.Model(inputs, L.Dense(4)(h))
    assert not output_masked(model, x)
    # Not Adam: the key bias's gradient is 0 but for rounding (a query's
    # scores all shift alike), which Adam would scale up to whole steps.
    optimizer = keras.optimizers.SGD(learning_rate=0.1, momentum=0.9)
    return small_run("mattn", x, y, model, optimizer)


def masked_regression(rng):
    """Real-valued sequences whose trailing steps are all 0 (Masking), a
    SimpleRNN over every step and two targets per step, the squared error
    over the unmasked steps only."""
    x = rng.normal(size=(REG_EXAMPLES, 10, 3)).astype(np.float32)
    lengths = rng.integers(4, 11, size=REG_EXAMPLES)
    for i, n in enumerate(lengths):
        x[i, n:] = 0
    y = np.cumsum(x[:, :, :2], axis=1).astype(np.float32) * 0.5
    fresh_session()
    keras.utils.set_random_seed(SEED + 28)
    L = keras.layers
    model = keras.Sequential([
        keras.Input((10, 3)),
        L.Masking(mask_value=0.0),
        L.SimpleRNN(6, return_sequences=True),
        L.Dense(2),
    ])
    assert output_masked(model, x)
    optimizer = keras.optimizers.Adam(learning_rate=0.01)
    return small_run("mreg", x, y, model, optimizer,
                     keras.losses.MeanSquaredError())


def masked_batch_norm(rng):
    """Batch normalization over padded ids' embeddings: its statistics (and
    moving ones) over the unmasked steps only (Keras's masked moments),
    then a GRU over the masked steps."""
    x, lengths = padded_ids(rng, 8, 16, 2)
    y = ((x[:, 0] > 8) * 2 + (lengths > 4)).astype(np.int64)
    fresh_session()
    keras.utils.set_random_seed(SEED + 29)
    L = keras.layers
    model = keras.Sequential([
        keras.Input((8,)),
        L.Embedding(16, 6, mask_zero=True),
        L.BatchNormalization(),
        L.GRU(5),
        L.Dense(4),
    ])
    assert not output_masked(model, x)
    optimizer = keras.optimizers.Adam(learning_rate=0.01)
    return small_run("mbn", x, y, model, optimizer)


def tagger_accumulated(rng):
    """The tagger under gradient accumulation: two micro-batches of
    REG_BATCH / 2 per step, the update the mean of their gradients (Keras's
    gradient_accumulation_steps), each micro-batch's loss its own masked
    mean; one micro-batch is padding alone (its loss 0: Keras's
    divide_no_nan). Also the final model's masked loss, accuracy and top-2
    accuracy over every example (what an evaluation of them reports)."""
    x, _ = padded_ids(rng, 8, 16, 2)
    x[6:12] = 0
    y = tagger_labels(x)
    model = tagger_model(SEED + 30)
    optimizer = keras.optimizers.Adam(learning_rate=0.01)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    trainable = model.trainable_variables
    micro = REG_BATCH // 2

    def run():
        losses = []
        for step in range(REG_STEPS):
            total, loss_sum = None, 0.0
            for k in range(2):
                first = ((2 * step + k) * micro) % REG_EXAMPLES
                xb, yb = x[first:first + micro], y[first:first + micro]
                with tf.GradientTape() as tape:
                    loss = loss_fn(tf.constant(yb),
                                   model(tf.constant(xb), training=True))
                grads = [tf.convert_to_tensor(g)
                         for g in tape.gradient(loss, trainable)]
                total = grads if total is None else [
                    a + b for a, b in zip(total, grads)]
                loss_sum += float(loss.numpy())
            optimizer.apply_gradients(zip([g / 2 for g in total], trainable))
            losses.append(loss_sum / 2)
        assert sum(losses[-4:]) < sum(losses[:4]), losses
        return losses

    tensors = [("tacc/x", x), ("tacc/y", y)] + record("tacc/", model, run)
    logits = model(tf.constant(x), training=False)
    kept = x != 0
    right = (np.argmax(logits.numpy(), axis=-1) == y) & kept
    # Keras's SparseTopKCategoricalAccuracy(k=2) of the probabilities, the
    # padded tokens' sample weights 0 (what Keras's masked metrics apply).
    top2 = keras.metrics.SparseTopKCategoricalAccuracy(k=2)
    top2.update_state(y, tf.nn.softmax(logits),
                      sample_weight=kept.astype(np.float32))
    return tensors + [
        ("tacc/eval_sparse_top_k_categorical_accuracy",
         np.array([float(top2.result())], dtype=np.float32)),
        ("tacc/eval_loss",
         np.array([float(loss_fn(tf.constant(y), logits).numpy())],
                  dtype=np.float32)),
        ("tacc/eval_accuracy",
         np.array([right.sum() / kept.sum()], dtype=np.float32))]


def inception(rng):
    """GoogLeNet's Inception block in small: four branches over one input
    (1x1; 1x1 then 3x3; 1x1 then 5x5; a 3x3 max pool then 1x1),
    concatenated; then a three-way Average of two convolutions and the
    input itself."""
    y = rng.integers(0, 4, size=REG_EXAMPLES).astype(np.int64)
    x = rng.uniform(0.0, 0.4, size=(REG_EXAMPLES, 8, 8, 3)).astype(
        np.float32)
    for i, label in enumerate(y):
        r, c = 4 * (label // 2), 4 * (label % 2)
        x[i, r:r + 4, c:c + 4, label % 3] += 0.5
    fresh_session()
    keras.utils.set_random_seed(SEED + 31)
    L = keras.layers
    inputs = keras.Input((8, 8, 3))
    h = L.Conv2D(8, 3, padding="same", activation="relu")(inputs)
    b0 = L.Conv2D(4, 1, activation="relu")(h)
    b1 = L.Conv2D(4, 1, activation="relu")(h)
    b1 = L.Conv2D(6, 3, padding="same", activation="relu")(b1)
    b2 = L.Conv2D(2, 1, activation="relu")(h)
    b2 = L.Conv2D(2, 5, padding="same", activation="relu")(b2)
    b3 = L.MaxPooling2D(3, strides=1, padding="same")(h)
    b3 = L.Conv2D(3, 1, activation="relu")(b3)
    h = L.Concatenate()([b0, b1, b2, b3])
    h = L.Average()([L.Conv2D(15, 1)(h), L.Conv2D(15, 3, padding="same")(h),
                     h])
    h = L.GlobalAveragePooling2D()(h)
    model = keras.Model(inputs, L.Dense(4)(h))
    optimizer = keras.optimizers.Adam(learning_rate=0.01)
    return small_run("incept", x, y, model, optimizer)


def residual(rng):
    """A residual block with a strided main path and a 1x1 strided
    shortcut, average and global average pooling, under Nesterov momentum;
    the layers made in mirrortrain's order, so both auto-name alike."""
    y = rng.integers(0, 10, size=RES_EXAMPLES).astype(np.int64)
    x = rng.uniform(0.0, 0.5, size=(RES_EXAMPLES, 8, 8, 3)).astype(np.float32)
    for i, label in enumerate(y):
        x[i, label % 8, :, label % 3] += 0.5
    fresh_session()
    keras.utils.set_random_seed(SEED + 3)
    L = keras.layers
    inputs = keras.Input((8, 8, 3))
    h = L.Conv2D(8, 3, padding="same", use_bias=False)(inputs)
    h = L.BatchNormalization(synchronized=True)(h)
    h = L.Activation("relu")(h)
    main = L.Conv2D(8, 3, strides=2, padding="same")(h)
    main = L.BatchNormalization(synchronized=True)(main)
    main = L.Activation("relu")(main)
    main = L.Conv2D(8, 3, padding="same")(main)
    shortcut = L.Conv2D(8, 1, strides=2)(h)
    h = L.Add()([main, shortcut])
    h = L.Activation("relu")(h)
    h = L.AveragePooling2D(2)(h)
    h = L.GlobalAveragePooling2D()(h)
    model = keras.Model(inputs, L.Dense(10)(h))

    batches = consecutive_batches(x, y, RES_BATCH)

    optimizer = keras.optimizers.SGD(learning_rate=RES_LR, momentum=MOMENTUM,
                                     nesterov=True)
    return [("res/x", x), ("res/y", y)] + record(
        "res/", model, lambda: train(model, optimizer, batches, RES_STEPS,
                                    RES_EXAMPLES // RES_BATCH))


def pointwise(rng):
    """Dense layers on an image's last axis (Keras Dense on [batch, H, W,
    C]: ConvNeXt's pointwise layers) after a strided conv and a layer
    normalization of the channels, under Adam."""
    y = rng.integers(0, 10, size=PW_EXAMPLES).astype(np.int64)
    x = rng.uniform(0.0, 0.5, size=(PW_EXAMPLES, 8, 8, 3)).astype(np.float32)
    for i, label in enumerate(y):
        x[i, label % 8, (label * 3) % 8, label % 3] += 0.8
    fresh_session()
    keras.utils.set_random_seed(SEED + 6)
    L = keras.layers
    model = keras.Sequential([
        keras.Input((8, 8, 3)),
        L.Conv2D(8, 3, strides=2, padding="same"),
        L.LayerNormalization(epsilon=1e-3),
        L.Dense(16, activation="gelu"),
        L.Dense(8),
        L.Flatten(),
        L.Dense(10),
    ])

    batches = consecutive_batches(x, y, PW_BATCH)

    optimizer = keras.optimizers.Adam(learning_rate=PW_LR)
    return [("pw/x", x), ("pw/y", y)] + record(
        "pw/", model, lambda: train(model, optimizer, batches, PW_STEPS,
                                   PW_EXAMPLES // PW_BATCH))


def depthwise(rng):
    """A ConvNeXt-style block (depthwise conv, layer normalization, two
    pointwise dense layers, in a residual) and a strided depthwise conv
    with two filters per channel, under Adam; Keras's auto-names."""
    y = rng.integers(0, 10, size=DW_EXAMPLES).astype(np.int64)
    x = rng.uniform(0.0, 0.5, size=(DW_EXAMPLES, 8, 8, 3)).astype(np.float32)
    for i, label in enumerate(y):
        x[i, (label * 5) % 8, label % 8, label % 3] += 0.8
    fresh_session()
    keras.utils.set_random_seed(SEED + 7)
    L = keras.layers
    inputs = keras.Input((8, 8, 3))
    h = L.Conv2D(8, 3, padding="same")(inputs)
    block = L.DepthwiseConv2D(3, padding="same")(h)
    block = L.LayerNormalization(epsilon=1e-3)(block)
    block = L.Dense(16, activation="gelu")(block)
    block = L.Dense(8)(block)
    h = L.Add()([block, h])
    h = L.DepthwiseConv2D(3, strides=2, depth_multiplier=2,
                          activation="relu")(h)
    h = L.GlobalAveragePooling2D()(h)
    model = keras.Model(inputs, L.Dense(10)(h))

    batches = consecutive_batches(x, y, DW_BATCH)

    optimizer = keras.optimizers.Adam(learning_rate=DW_LR)
    return [("dw/x", x), ("dw/y", y)] + record(
        "dw/", model, lambda: train(model, optimizer, batches, DW_STEPS,
                                   DW_EXAMPLES // DW_BATCH))


def main():
    rng = np.random.default_rng(SEED)
    tensors = (cnn(rng) + language_model(rng) + regularized(rng) +
               residual(rng))
    # Each gradient clipped by its own norm (Keras's clipnorm), under
    # Adagrad; each element clipped (clipvalue), under SGD.
    tensors += clipped(rng, "clipn",
                       keras.optimizers.Adagrad(learning_rate=0.1,
                                                clipnorm=CLIP_NORM),
                       SEED + 4)
    tensors += clipped(rng, "clipv",
                       keras.optimizers.SGD(learning_rate=0.5,
                                            clipvalue=CLIP_VALUE),
                       SEED + 5)
    tensors += pointwise(rng)
    tensors += depthwise(rng)
    # binary_crossentropy: a sigmoid output (from_logits=False, the loss
    # reading its logits) on one label per example; multi-label logits with
    # label smoothing.
    tensors += binary(rng, "bin", 1,
                      lambda: keras.layers.Dense(1, activation="sigmoid"),
                      keras.losses.BinaryCrossentropy(),
                      keras.optimizers.SGD(learning_rate=0.5, momentum=0.9),
                      SEED + 6)
    tensors += binary(rng, "multi", 3, lambda: keras.layers.Dense(3),
                      keras.losses.BinaryCrossentropy(
                          from_logits=True, label_smoothing=BIN_SMOOTHING),
                      keras.optimizers.Adam(learning_rate=0.01), SEED + 7)
    tensors += sequences(rng)
    # Regression: real-valued targets, one per example and two.
    tensors += regression(rng, "mse", 1, keras.losses.MeanSquaredError(),
                          keras.optimizers.SGD(learning_rate=0.02,
                                               momentum=0.9), SEED + 9)
    # MAE's gradient jumps where an output meets its target: offsets keep
    # every output on one side of its target over the run, so replicas'
    # rounding (another product order) cannot flip a sign.
    tensors += regression(rng, "mae", 2, keras.losses.MeanAbsoluteError(),
                          keras.optimizers.Adam(learning_rate=0.01), SEED + 10,
                          offsets=np.array([20.0, -20.0]))
    tensors += concatenated(rng)
    tensors += segmentation(rng)
    # Huber away from its default delta: errors start beyond it (the
    # linear part) and some come within it (the quadratic part).
    tensors += regression(rng, "huber", 2, keras.losses.Huber(delta=0.5),
                          keras.optimizers.SGD(learning_rate=0.05,
                                               momentum=0.9), SEED + 13,
                          straddles=0.5)
    tensors += mobile(rng)
    tensors += wave(rng)
    tensors += recurrent(rng)
    tensors += bidirectional(rng)
    tensors += seq2seq(rng)
    tensors += decoder(rng)
    tensors += merges(rng)
    tensors += atrous(rng)
    tensors += simple_recurrent(rng)
    tensors += conformer(rng)
    tensors += video(rng)
    tensors += masked_text(rng)
    tensors += tagger(rng)
    tensors += masked_attention(rng)
    tensors += masked_regression(rng)
    tensors += masked_batch_norm(rng)
    tensors += tagger_accumulated(rng)
    tensors += inception(rng)
    comment = """\
Generated by scripts/golden/keras_training.py with Keras %s (seed %d).
Every run: float32, SparseCategoricalCrossentropy(from_logits=True) (the
mean over the batch's labels; bin and multi: BinaryCrossentropy; mse and
mae, huber: their regression losses), training=True, consecutive unshuffled
batches; <run>/init/* and <run>/final/*: every variable before the first
step and after the last, named as mirrortrain's checkpoints (Keras's
variable paths); <run>/loss: each step's loss, before its update. The
gradients are made dense before the update (an Embedding's IndexedSlices
summed per id, as TF1's optimizers deduplicated them).
cnn: Conv2D(4, 3, same, relu) "conv2d", MaxPooling2D(2),
BatchNormalization(synchronized=True) (momentum 0.99, epsilon 1e-3),
Flatten, Dense(16, gelu) "dense", Dense(10) "dense_1";
SGD(learning_rate=%g, momentum=%g); %d steps of %d of cnn/x, cnn/y.
lm: the bytes lm/text (%d; the last %g held out) as the text source cuts
them: windows of %d inputs and next-byte targets; Embedding(256, 8),
x + MultiHeadAttention(num_heads=2, key_dim=4)(x, x, use_causal_mask=True),
LayerNormalization(epsilon=1e-3), Dense(256) "dense"; Adam(learning_rate=
%g); %d steps of %d windows.
reg: Dense(16, relu) "hidden", Dense(4) (auto-named "dense"), both with
kernel_regularizer=L2(%g / 2) (the penalty in the loss differentiated, not
in reg/loss); RMSprop(learning_rate=%g, global_clipnorm=%g); %d steps of
%d of reg/x, reg/y.
res: Conv2D(8, 3, same, no bias), BatchNormalization(synchronized=True),
relu, then relu(main + shortcut) with main Conv2D(8, 3, strides 2, same),
BatchNormalization(synchronized=True), relu, Conv2D(8, 3, same) and
shortcut Conv2D(8, 1, strides 2), AveragePooling2D(2),
GlobalAveragePooling2D, Dense(10), Keras's auto-names;
SGD(learning_rate=%g, momentum=%g, nesterov=True); %d steps of %d of
res/x, res/y.
clipn, clipv: Dense(16, relu), Dense(4) (auto-named dense, dense_1) on
<run>/x, <run>/y, %d steps of %d; clipn: Adagrad(learning_rate=0.1,
clipnorm=%g) (each gradient by its own norm); clipv: SGD(learning_rate=0.5,
clipvalue=%g).
pw: Conv2D(8, 3, strides 2, same), LayerNormalization(epsilon=1e-3),
Dense(16, gelu) and Dense(8) on the [4, 4, 8] image's last axis, Flatten,
Dense(10), Keras's auto-names; Adam(learning_rate=%g); %d steps of %d of
pw/x, pw/y.
dw: Conv2D(8, 3, same), then x + Dense(8)(Dense(16, gelu)(
LayerNormalization(epsilon=1e-3)(DepthwiseConv2D(3, same)(x))))
(ConvNeXt's block), DepthwiseConv2D(3, strides 2, depth_multiplier 2,
relu), GlobalAveragePooling2D, Dense(10), Keras's auto-names;
Adam(learning_rate=%g); %d steps of %d of dw/x, dw/y.
bin, multi: Dense(16, relu), then for bin Dense(1, sigmoid) under
BinaryCrossentropy() (from_logits=False: Keras reads the sigmoid's logits)
and SGD(learning_rate=0.5, momentum=0.9) on 0/1 labels bin/y [n]; for multi
Dense(3) under BinaryCrossentropy(from_logits=True, label_smoothing=%g) and
Adam(learning_rate=0.01) on 0/1 labels multi/y [n, 3]; %d steps of %d.
seq: Conv1D(6, 3, causal, relu), Conv1D(4, 3, strides 2, same), Flatten,
Dense(4), Keras's auto-names; Adam(learning_rate=0.01) on sequences
seq/x [n, 10, 4], seq/y; %d steps of %d.
mse, mae: Dense(16, relu), Dense(k) on real-valued targets (float32 y:
mse/y [n], mae/y [n, 2], the latter offset by +20 and -20 so no output
meets its target); mse: MeanSquaredError, SGD(learning_rate=0.02,
momentum=0.9); mae: MeanAbsoluteError, Adam(learning_rate=0.01); %d steps
of %d.
huber: as mse, mae, two targets, under Huber(delta=0.5) and
SGD(learning_rate=0.05, momentum=0.9); %d steps of %d.
mobile: Conv2D(8, 3, same, relu), ZeroPadding2D(((0, 1), (0, 1))),
DepthwiseConv2D(3, strides 2, valid, relu), Conv2D(8, 1, groups=2),
Conv2D(6, 3, dilation_rate=2, same, relu), Cropping2D(((1, 0), (0, 1))),
GlobalAveragePooling2D, Dense(4), Keras's auto-names; Adam(learning_rate=
0.01) on mobile/x [n, 8, 8, 3]; %d steps of %d.
wave: Conv1D(6, 2, causal, relu), Conv1D(6, 2, causal, dilation_rate=2,
groups=2, relu), Conv1D(4, 2, causal, dilation_rate=4), Cropping1D((4,
0)), ZeroPadding1D((0, 1)), Flatten, Dense(4), Keras's auto-names;
Adam(learning_rate=0.01) on wave/x [n, 12, 4]; %d steps of %d.
rnn: LSTM(8, return_sequences=True), GRU(6, go_backwards=True),
Dense(4), Keras's auto-names (and initializers: orthogonal recurrent
kernels, unit_forget_bias, GRU's reset_after bias [2, 18]); Adam(learning_rate=0.01) on rnn/x [n, 10, 4];
%d steps of %d.
cat: Conv2D(4, 3, same, relu) h, then [Conv2D(3, 3, same, relu)(h), h]
concatenated, then [Dense(5)(h), Conv2D(2, 1)(h)] concatenated,
GlobalAveragePooling2D, Dense(4), Keras's auto-names; Adam(learning_rate=
0.01); %d steps of %d.
unet: per-pixel classes unet/y [n, 8, 8]: Conv2D(4, 3, same, relu) h, then
[UpSampling2D(2)(Conv2D(4, 3, relu)(ZeroPadding2D(1)(MaxPooling2D(2)(h)))),
h] concatenated, Conv2D(3, 1) logits per pixel; Adam(learning_rate=0.01);
%d steps of %d.
birnn: Bidirectional(LSTM(5, return_sequences=True)) (concat),
Bidirectional(GRU(3), merge_mode="sum"), Dense(4), Keras's auto-names
(bidirectional/forward_lstm, .../backward_lstm, bidirectional_1/
forward_gru, ...); Adam(learning_rate=0.01) on birnn/x [n, 10, 4]; %d
steps of %d.
s2s: LSTM(8), RepeatVector(3), LSTM(6, return_sequences=True), Dense(3)
on s2s/x [n, 10, 4], a class per output step (s2s/y [n, 3]);
Adam(learning_rate=0.01); %d steps of %d.
deconv: per-pixel classes deconv/y [n, 8, 8]: Conv2D(4, 3, strides 2,
relu), Conv2DTranspose(6, 3, strides 2, same, output_padding=0, relu),
Conv2DTranspose(4, 4, relu), Conv2DTranspose(3, 1), Keras's auto-names;
Adam(learning_rate=0.01); %d steps of %d.
merge: Conv2D(8, 3, same, relu) h; h = Multiply()([s, h]) with s =
Conv2D(8, 1, sigmoid)(Conv2D(4, 1, relu)(GlobalAveragePooling2D(keepdims=
True)(h))); h = Maximum()([Conv2D(8, 3, same)(h), h]); h = Average()([
Conv2D(8, 1)(h), h]); h = Subtract()([Dense(8)(h), h]); h = Minimum()([
Conv2D(8, 3, same)(h), tanh(h)]); GlobalAveragePooling2D, Dense(4), Keras's
auto-names; Adam(learning_rate=0.01) on merge/x [n, 8, 8, 3]; %d steps of
%d.
atrous: per-pixel classes atrous/y [n, 8, 8]: Conv2D(6, 3, strides 2,
same, relu), Conv2D(6, 3, dilation_rate=2, same, relu), Conv2D(3, 1,
strides 2), UpSampling2D(4, interpolation="bilinear"), Keras's auto-names;
Adam(learning_rate=0.01); %d steps of %d.
srnn: Bidirectional(SimpleRNN(6, return_sequences=True), merge_mode="ave"),
SimpleRNN(5), Dense(4), Keras's auto-names (bidirectional/
forward_simple_rnn, ...); Adam(learning_rate=0.01) on srnn/x [n, 10, 4]; %d
steps of %d.
conformer: Conv1D(8, 1), DepthwiseConv1D(3, same), LayerNormalization(
epsilon=1e-3), swish, SeparableConv1D(6, 3, strides 2, same,
depth_multiplier=2), Flatten, Dense(4), Keras's auto-names;
Adam(learning_rate=0.01) on conformer/x [n, 10, 4]; %d steps of %d.
video: TimeDistributed(Conv2D(4, 3, relu)), TimeDistributed(
BatchNormalization()), TimeDistributed(GlobalAveragePooling2D()), LSTM(6),
Dense(4), Keras's auto-names
(time_distributed/conv2d/...); Adam(learning_rate=0.01) on clips video/x
[n, 4, 6, 6, 1]; %d steps of %d.
Masking (the padded steps skipped; Keras's losses weigh each label by the
output's mask), Keras's auto-names, Adam(learning_rate=0.01) but for mattn:
mtext: Embedding(20, 6, mask_zero=True), LSTM(8, return_sequences=True),
GRU(5), Dense(4) on padded ids mtext/x [n, 10] (0: padding; right-padded,
every fourth row left-padded); %d steps of %d.
tagger: Embedding(16, 6, mask_zero=True), Bidirectional(GRU(4,
return_sequences=True)), Dense(3): a class per token (tagger/y [n, 8]),
the loss over unmasked tokens; %d steps of %d.
mattn: Embedding(16, 8, mask_zero=True) h, Add()([h,
MultiHeadAttention(num_heads=2, key_dim=4)(h, h, use_causal_mask=True)]),
LayerNormalization(epsilon=1e-3), GlobalAveragePooling1D (over unmasked
steps), Dense(4); SGD(learning_rate=0.1, momentum=0.9); %d steps of %d.
mreg: Masking(0.0), SimpleRNN(6, return_sequences=True), Dense(2) on
sequences mreg/x [n, 10, 3] whose trailing steps are 0, targets mreg/y [n,
10, 2] under MeanSquaredError over unmasked steps; %d steps of %d.
mbn: Embedding(16, 6, mask_zero=True), BatchNormalization() (its moments
over the unmasked steps), GRU(5), Dense(4) on padded ids mbn/x [n, 8]; %d
steps of %d.
tacc: the tagger's model on tacc/x (rows 6-11 padding alone), each step
two micro-batches of %d, the update their gradients' mean (Keras's
gradient_accumulation_steps), tacc/loss their losses' mean; %d steps;
tacc/eval_loss, tacc/eval_accuracy and
tacc/eval_sparse_top_k_categorical_accuracy (k=2): the final model's masked
loss, accuracy and top-2 accuracy over every example, in one batch.
incept: Conv2D(8, 3, same, relu) h, then Concatenate()([Conv2D(4, 1,
relu)(h), Conv2D(6, 3, same, relu)(Conv2D(4, 1, relu)(h)), Conv2D(2, 5,
same, relu)(Conv2D(2, 1, relu)(h)), Conv2D(3, 1, relu)(MaxPooling2D(3,
strides=1, same)(h))]) h, Average()([Conv2D(15, 1)(h), Conv2D(15, 3,
same)(h), h]), GlobalAveragePooling2D, Dense(4), Keras's auto-names;
Adam(learning_rate=0.01) on incept/x [n, 8, 8, 3]; %d steps of %d.""" % (
        keras.__version__, SEED, LR, MOMENTUM, CNN_STEPS, CNN_BATCH,
        LM_BYTES, LM_FRACTION, LM_LENGTH, LM_LR, LM_STEPS, LM_BATCH,
        REG_L2, REG_LR, REG_CLIP, REG_STEPS, REG_BATCH, RES_LR, MOMENTUM,
        RES_STEPS, RES_BATCH, REG_STEPS, REG_BATCH, CLIP_NORM, CLIP_VALUE,
        PW_LR, PW_STEPS, PW_BATCH, DW_LR, DW_STEPS, DW_BATCH, BIN_SMOOTHING,
        REG_STEPS, REG_BATCH, REG_STEPS, REG_BATCH, REG_STEPS, REG_BATCH,
        REG_STEPS, REG_BATCH, REG_STEPS, REG_BATCH, REG_STEPS, REG_BATCH,
        REG_STEPS, REG_BATCH, REG_STEPS, REG_BATCH, REG_STEPS, REG_BATCH,
        REG_STEPS, REG_BATCH, REG_STEPS, REG_BATCH, REG_STEPS, REG_BATCH,
        REG_STEPS, REG_BATCH, REG_STEPS, REG_BATCH, REG_STEPS, REG_BATCH,
        REG_STEPS, REG_BATCH, REG_STEPS, REG_BATCH, REG_STEPS, REG_BATCH,
        REG_STEPS, REG_BATCH, REG_STEPS, REG_BATCH, REG_STEPS, REG_BATCH,
        REG_STEPS, REG_BATCH, REG_BATCH // 2, REG_STEPS, REG_STEPS, REG_BATCH)
    write_golden("keras_training.txt", tensors, comment)


if __name__ == "__main__":
    main()
