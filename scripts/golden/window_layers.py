"""Golden values of conv and pooling layers with rectangular windows.

Keras takes kernel_size, strides and pool_size as an integer or a
(height, width) pair; these cases use pairs whose two entries differ, so a
swapped or squared dimension shows. Writes tests/golden/window_layers.txt,
for each case <c>: the input x [2, 7, 6, 3] (float64), the upstream
gradient, the layer's variables (assigned: kernel, bias), its output y, and
the gradients of sum(y * upstream) with respect to x and every variable:
  * conv_same/*: Conv2D(2, kernel_size=(1, 3), strides=(2, 1), same).
  * conv_valid/*: Conv2D(3, kernel_size=(3, 2), strides=(1, 2), valid).
  * depthwise/*: DepthwiseConv2D(kernel_size=(3, 1), strides=(2, 2), same,
    depth_multiplier=2) (TensorFlow's depthwise kernel takes equal strides
    only).
  * max_pool/*: MaxPooling2D(pool_size=(2, 3), strides=(1, 2), valid).
  * avg_pool/*: AveragePooling2D(pool_size=(3, 2), strides=(2, 1), same).
  * max_pool_default/*: MaxPooling2D(pool_size=(3, 2)) (strides None: the
    pool size).
  * global_max/*, global_max_keep/*: GlobalMaxPooling2D(), and with
    keepdims=True (the whole image as one window).
  * conv1d_same/*, conv1d_valid/*, conv1d_causal/*: Conv1D on sequences x
    [2, 9, 3]: Conv1D(4, 3, strides=2, same), Conv1D(2, 4, valid, no
    bias), Conv1D(3, 3, strides=2, causal, tanh).
  * conv1d_same_odd/*, conv1d_valid_stride/*, conv1d_causal_one/*:
    Conv1D(2, 4, strides=2, same) (padding 1 before, 2 after),
    Conv1D(3, 2, strides=3, valid, no bias, relu), Conv1D(2, 1, causal).
  * separable_same/*, separable_valid/*: SeparableConv2D(4, (3, 2),
    strides=(2, 2), same, depth_multiplier=2, relu), SeparableConv2D(2, 3,
    valid, no bias) on x [2, 7, 6, 3].
  * group_norm/*, group_norm_seq/*, group_norm_instance/*:
    GroupNormalization(groups=2) on [2, 5, 4, 6]; (groups=3, epsilon=0.01,
    center=False) on sequences [2, 7, 6]; (groups=6: one channel a group,
    instance normalization) on [2, 3, 3, 6]. gamma and beta are assigned
    random values as the other layers' variables are.
  * max_pool1d_same/*, global_avg1d/*: MaxPooling1D(4, strides=3, same),
    GlobalAveragePooling1D() on x [2, 9, 3].
  * up_sampling/*, zero_padding/*: UpSampling2D((2, 3)) and
    ZeroPadding2D((1, 2)) on x [2, 3, 4, 2].
  * max_pool1d/*, avg_pool1d/*, max_pool1d_default/*, global_max1d/*,
    global_avg1d_keep/*: MaxPooling1D(3, strides=2, valid),
    AveragePooling1D(4, strides=3, same), MaxPooling1D() (pool 2, strides
    the pool), GlobalMaxPooling1D(), GlobalAveragePooling1D(keepdims=True)
    on x [2, 9, 3].
  * dilated windows (dilation_rate): conv_dilated_same/*: Conv2D(2, (3, 2),
    dilation_rate=(2, 3), same) (a 5x4 span); conv_dilated_valid/*:
    Conv2D(3, 3, dilation_rate=2, valid, relu); conv1d_dilated_causal/*:
    Conv1D(2, 3, dilation_rate=3, causal) (WaveNet's: 6 zeros in front);
    conv1d_dilated_same/*: Conv1D(2, 2, dilation_rate=3, same, no bias)
    (padding 1 before, 2 after); depthwise_dilated/*: DepthwiseConv2D((3,
    2), dilation_rate=(2, 2), same, depth_multiplier=2);
    separable_dilated/*: SeparableConv2D(3, 2, dilation_rate=(2, 3),
    valid) (the depthwise step dilated).
  * grouped convolutions (groups): conv_grouped/*: Conv2D(6, (3, 2),
    strides=(2, 1), groups=3, same); conv_grouped_two/*: Conv2D(4, 3,
    groups=2, relu, no bias) on x [2, 5, 5, 4]; conv1d_grouped/*: Conv1D(6,
    2, groups=3, dilation_rate=2, causal).
  * sides padded and cropped: zero_padding_sides/*: ZeroPadding2D(((0, 1),
    (2, 1))) on x [2, 3, 4, 2]; cropping/*: Cropping2D(((1, 0), (1, 2)));
    cropping_square/*: Cropping2D(2); zero_padding1d/*: ZeroPadding1D((2,
    1)); cropping1d/*: Cropping1D((1, 3)) on x [2, 9, 3]; cropping_end/*:
    Cropping2D(((0, 2), (0, 1))) (nothing off the start).
  * lstm_seq/*, lstm_back/*, lstm_back_seq/*: LSTM(4, return_sequences),
    LSTM(3, go_backwards, no bias), LSTM(2, go_backwards, return_sequences,
    relu) on x [2, 9, 3] (kernel, recurrent_kernel, bias).
  * gru_seq/*, gru_before/*, gru_no_bias/*: GRU(4, return_sequences)
    (reset_after: bias [2, 12]), GRU(3, reset_after=False, go_backwards),
    GRU(2, no bias, return_sequences, relu) on x [2, 9, 3].
  * permute_seq/*, permute_image/*, repeat_vector/*: Permute((2, 1)) on x
    [2, 9, 3], Permute((3, 1, 2)) on x [2, 7, 6, 3], RepeatVector(4) on x
    [2, 5].
  * prelu_image/*, prelu_seq/*: PReLU(shared_axes=[1, 2]) (alpha [1, 1,
    3]), PReLU() on x [2, 9, 3] (alpha [9, 3]).
  * transposed convolutions on x [2, 3, 4, 3]: conv_transpose_same/*:
    Conv2DTranspose(2, (3, 2), strides=(2, 3), same) (6x12);
    conv_transpose_valid/*: Conv2DTranspose(3, 3, strides=2, valid, relu)
    (7x9); conv_transpose_pad/*: Conv2DTranspose(2, (2, 3), strides=(3, 2),
    output_padding=(1, 1), same, no bias) (7x8); conv_transpose_wide/*:
    Conv2DTranspose(2, 2, strides=3) (strides above the kernel: 9x12);
    conv_transpose_dilated/*: Conv2DTranspose(2, (2, 3), dilation_rate=(2,
    1), same) (TensorFlow's CPU kernels refuse a dilated transpose, so this
    one is computed as what the layer is, the adjoint of the dilated
    convolution: see adjoint_case); and on x [2, 9, 3]: conv1d_transpose/*: Conv1DTranspose(3,
    3, strides=2, same, tanh) (18 steps); conv1d_transpose_pad/*:
    Conv1DTranspose(2, 4, strides=3, output_padding=2) (30 steps).
  * bilinear up-sampling: up_bilinear/*: UpSampling2D((2, 3),
    interpolation="bilinear") on x [2, 3, 4, 2]; up_bilinear_edge/*:
    UpSampling2D(4, bilinear) on x [2, 1, 3, 2] (one row: every output row
    its copy); up_bilinear_long/*: UpSampling2D((7, 1), bilinear) on x [1,
    256, 1, 1] (TensorFlow's float32 lerps drift along a long axis for a
    factor that is not a power of two).
  * 1-D depthwise and separable: depthwise1d/*: DepthwiseConv1D(3,
    strides=2, same, depth_multiplier=2); depthwise1d_dilated/*:
    DepthwiseConv1D(2, dilation_rate=3, relu, no bias); separable1d/*:
    SeparableConv1D(4, 3, same, depth_multiplier=2, relu);
    separable1d_dilated/*: SeparableConv1D(2, 2, dilation_rate=2, no
    bias), on x [2, 9, 3]; depthwise_strided_dilated/*:
    DepthwiseConv2D(3, strides=2, dilation_rate=2, same) on x [2, 7, 6, 3]
    and separable1d_strided_dilated/*: SeparableConv1D(3, 2, strides=2,
    dilation_rate=2) on x [2, 9, 3] (Keras's depthwise layers take both).
  * up_bilinear_mixed/*, up_bilinear_mixed_two/*: UpSampling2D((61, 1),
    bilinear) on x [1, 10, 1, 1] and UpSampling2D((41, 1)) on x [1, 2, 1,
    1]: the middle phase of an odd factor falls on either side of its
    cells in float32, cell by cell.
  * time_distributed_conv/*: TimeDistributed(Conv2D(4, 3, strides=2, same,
    relu)) on frames x [2, 3, 5, 5, 2]; time_distributed_dense/*:
    TimeDistributed(Dense(3)) on x [2, 9, 3] (variables
    time_distributed/<layer>/kernel).
  * rescaling/*: Rescaling(2.0, offset=-1.0) on x [2, 9, 3];
    unit_normalization/*: UnitNormalization() on x [2, 7, 6, 3].
  * simple_rnn_seq/*, simple_rnn_back/*: SimpleRNN(4, return_sequences),
    SimpleRNN(3, go_backwards, relu) on x [2, 9, 3] (kernel,
    recurrent_kernel, bias).

Run from the repository root:
    python3 scripts/golden/window_layers.py
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_io import write_golden  # noqa: E402

SEED = 2611
INPUT = (2, 7, 6, 3)


def case(prefix, rng, layer, shape=INPUT):
    x = rng.normal(size=shape)
    layer.build(x.shape)
    for v in layer.weights:
        v.assign(rng.normal(size=tuple(v.shape)) * 0.5)
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        y = layer(xt)
    up = rng.normal(size=tuple(y.shape))
    with tf.GradientTape() as tape:
        tape.watch(xt)
        obj = tf.reduce_sum(layer(xt) * up)
    grads = tape.gradient(obj, [xt] + list(layer.weights))
    out = [(prefix + "/x", x), (prefix + "/upstream", up),
           (prefix + "/y", y.numpy()), (prefix + "/dx", grads[0].numpy())]
    for v, g in zip(layer.weights, grads[1:]):
        part = v.path.split("/")[-1]  # kernel, bias, depthwise_kernel
        out.append((prefix + "/" + part, v.numpy()))
        out.append((prefix + "/d" + part, g.numpy()))
    return out


def adjoint_case(prefix, rng, layer, shape):
    """case() for a Conv2DTranspose that TensorFlow's CPU kernels refuse.

    The layer's output is the gradient, with respect to an input v of the
    output's shape, of sum(conv(v, kernel) * x) under the same window
    (tf.nn.convolution, which runs a dilated window on CPUs by
    space-to-batch), plus the bias; its gradients differentiate that again.
    The variables are Keras's (shapes, names, draws) as in case(). For the
    undilated cases, which Keras runs, it gives Keras's values bit for bit.
    """
    x = rng.normal(size=shape)
    layer.build(x.shape)
    for v in layer.weights:
        v.assign(rng.normal(size=tuple(v.shape)) * 0.5)
    out_shape = layer.compute_output_shape(x.shape)
    xt = tf.constant(x)

    def forward():
        v = tf.zeros(out_shape, tf.float64)
        with tf.GradientTape() as inner:
            inner.watch(v)
            conv = tf.nn.convolution(v, layer.kernel, strides=layer.strides,
                                     padding=layer.padding.upper(),
                                     dilations=layer.dilation_rate)
            s = tf.reduce_sum(conv * xt)
        return inner.gradient(s, v) + layer.bias

    y = forward()
    up = rng.normal(size=tuple(y.shape))
    with tf.GradientTape() as tape:
        tape.watch(xt)
        obj = tf.reduce_sum(forward() * up)
    grads = tape.gradient(obj, [xt] + list(layer.weights))
    out = [(prefix + "/x", x), (prefix + "/upstream", up),
           (prefix + "/y", y.numpy()), (prefix + "/dx", grads[0].numpy())]
    for v, g in zip(layer.weights, grads[1:]):
        part = v.path.split("/")[-1]
        out.append((prefix + "/" + part, v.numpy()))
        out.append((prefix + "/d" + part, g.numpy()))
    return out


def main():
    rng = np.random.default_rng(SEED)
    f64 = {"dtype": "float64"}
    tensors = []
    tensors += case("conv_same", rng, keras.layers.Conv2D(
        2, (1, 3), strides=(2, 1), padding="same", **f64))
    tensors += case("conv_valid", rng, keras.layers.Conv2D(
        3, (3, 2), strides=(1, 2), padding="valid", **f64))
    tensors += case("depthwise", rng, keras.layers.DepthwiseConv2D(
        (3, 1), strides=(2, 2), padding="same", depth_multiplier=2, **f64))
    tensors += case("max_pool", rng, keras.layers.MaxPooling2D(
        (2, 3), strides=(1, 2), padding="valid", **f64))
    tensors += case("avg_pool", rng, keras.layers.AveragePooling2D(
        (3, 2), strides=(2, 1), padding="same", **f64))
    tensors += case("max_pool_default", rng, keras.layers.MaxPooling2D(
        (3, 2), **f64))
    tensors += case("global_max", rng, keras.layers.GlobalMaxPooling2D(**f64))
    tensors += case("global_max_keep", rng, keras.layers.GlobalMaxPooling2D(
        keepdims=True, **f64))
    seq = (2, 9, 3)
    tensors += case("conv1d_same", rng, keras.layers.Conv1D(
        4, 3, strides=2, padding="same", **f64), seq)
    tensors += case("conv1d_valid", rng, keras.layers.Conv1D(
        2, 4, padding="valid", use_bias=False, **f64), seq)
    tensors += case("conv1d_causal", rng, keras.layers.Conv1D(
        3, 3, strides=2, padding="causal", activation="tanh", **f64), seq)
    tensors += case("max_pool1d", rng, keras.layers.MaxPooling1D(
        3, strides=2, padding="valid", **f64), seq)
    tensors += case("avg_pool1d", rng, keras.layers.AveragePooling1D(
        4, strides=3, padding="same", **f64), seq)
    tensors += case("max_pool1d_default", rng, keras.layers.MaxPooling1D(
        **f64), seq)
    tensors += case("global_max1d", rng,
                    keras.layers.GlobalMaxPooling1D(**f64), seq)
    tensors += case("global_avg1d_keep", rng,
                    keras.layers.GlobalAveragePooling1D(keepdims=True, **f64),
                    seq)
    tensors += case("conv1d_same_odd", rng, keras.layers.Conv1D(
        2, 4, strides=2, padding="same", **f64), seq)
    tensors += case("conv1d_valid_stride", rng, keras.layers.Conv1D(
        3, 2, strides=3, padding="valid", use_bias=False, activation="relu",
        **f64), seq)
    tensors += case("conv1d_causal_one", rng, keras.layers.Conv1D(
        2, 1, padding="causal", **f64), seq)
    tensors += case("separable_same", rng, keras.layers.SeparableConv2D(
        4, (3, 2), strides=(2, 2), padding="same", depth_multiplier=2,
        activation="relu", **f64))
    tensors += case("separable_valid", rng, keras.layers.SeparableConv2D(
        2, 3, padding="valid", use_bias=False, **f64))
    tensors += case("group_norm", rng, keras.layers.GroupNormalization(
        groups=2, **f64), (2, 5, 4, 6))
    tensors += case("group_norm_seq", rng, keras.layers.GroupNormalization(
        groups=3, epsilon=0.01, center=False, **f64), (2, 7, 6))
    tensors += case("group_norm_instance", rng,
                    keras.layers.GroupNormalization(groups=6, **f64),
                    (2, 3, 3, 6))
    tensors += case("max_pool1d_same", rng, keras.layers.MaxPooling1D(
        4, strides=3, padding="same", **f64), seq)
    tensors += case("global_avg1d", rng,
                    keras.layers.GlobalAveragePooling1D(**f64), seq)
    tensors += case("up_sampling", rng, keras.layers.UpSampling2D(
        (2, 3), **f64), (2, 3, 4, 2))
    tensors += case("zero_padding", rng, keras.layers.ZeroPadding2D(
        (1, 2), **f64), (2, 3, 4, 2))
    # Dilated (atrous) windows.
    tensors += case("conv_dilated_same", rng, keras.layers.Conv2D(
        2, (3, 2), dilation_rate=(2, 3), padding="same", **f64))
    tensors += case("conv_dilated_valid", rng, keras.layers.Conv2D(
        3, 3, dilation_rate=2, padding="valid", activation="relu", **f64))
    tensors += case("conv1d_dilated_causal", rng, keras.layers.Conv1D(
        2, 3, dilation_rate=3, padding="causal", **f64), seq)
    tensors += case("conv1d_dilated_same", rng, keras.layers.Conv1D(
        2, 2, dilation_rate=3, padding="same", use_bias=False, **f64), seq)
    tensors += case("depthwise_dilated", rng, keras.layers.DepthwiseConv2D(
        (3, 2), dilation_rate=(2, 2), padding="same", depth_multiplier=2,
        **f64))
    tensors += case("separable_dilated", rng, keras.layers.SeparableConv2D(
        3, 2, dilation_rate=(2, 3), padding="valid", **f64))
    # Grouped convolutions (groups): each group of channels with its own
    # filters.
    tensors += case("conv_grouped", rng, keras.layers.Conv2D(
        6, (3, 2), strides=(2, 1), groups=3, padding="same", **f64))
    tensors += case("conv_grouped_two", rng, keras.layers.Conv2D(
        4, 3, groups=2, activation="relu", use_bias=False, **f64),
        (2, 5, 5, 4))
    tensors += case("conv1d_grouped", rng, keras.layers.Conv1D(
        6, 2, groups=3, dilation_rate=2, padding="causal", **f64), seq)
    # Each side its own count: padding and cropping.
    tensors += case("zero_padding_sides", rng, keras.layers.ZeroPadding2D(
        ((0, 1), (2, 1)), **f64), (2, 3, 4, 2))
    tensors += case("cropping", rng, keras.layers.Cropping2D(
        ((1, 0), (1, 2)), **f64))
    tensors += case("cropping_square", rng, keras.layers.Cropping2D(
        2, **f64))
    tensors += case("zero_padding1d", rng, keras.layers.ZeroPadding1D(
        (2, 1), **f64), seq)
    tensors += case("cropping1d", rng, keras.layers.Cropping1D(
        (1, 3), **f64), seq)
    tensors += case("cropping_end", rng, keras.layers.Cropping2D(
        ((0, 2), (0, 1)), **f64))
    # Recurrent: LSTM through time, every gradient.
    tensors += case("lstm_seq", rng, keras.layers.LSTM(
        4, return_sequences=True, **f64), seq)
    tensors += case("lstm_back", rng, keras.layers.LSTM(
        3, go_backwards=True, use_bias=False, **f64), seq)
    tensors += case("lstm_back_seq", rng, keras.layers.LSTM(
        2, go_backwards=True, return_sequences=True, activation="relu",
        **f64), seq)
    tensors += case("gru_seq", rng, keras.layers.GRU(
        4, return_sequences=True, **f64), seq)
    tensors += case("gru_before", rng, keras.layers.GRU(
        3, reset_after=False, go_backwards=True, **f64), seq)
    tensors += case("gru_no_bias", rng, keras.layers.GRU(
        2, use_bias=False, return_sequences=True, activation="relu", **f64),
        seq)
    # Values moved or repeated.
    tensors += case("permute_seq", rng, keras.layers.Permute((2, 1), **f64),
                    seq)
    tensors += case("permute_image", rng, keras.layers.Permute(
        (3, 1, 2), **f64))
    tensors += case("repeat_vector", rng, keras.layers.RepeatVector(
        4, **f64), (2, 5))
    # A learned activation (alpha assigned random values, as every
    # variable here).
    tensors += case("prelu_image", rng, keras.layers.PReLU(
        shared_axes=[1, 2], **f64))
    tensors += case("prelu_seq", rng, keras.layers.PReLU(**f64), seq)
    # Transposed convolutions: up-sampling by strides.
    small = (2, 3, 4, 3)
    tensors += case("conv_transpose_same", rng, keras.layers.Conv2DTranspose(
        2, (3, 2), strides=(2, 3), padding="same", **f64), small)
    tensors += case("conv_transpose_valid", rng,
                    keras.layers.Conv2DTranspose(
                        3, 3, strides=2, activation="relu", **f64), small)
    tensors += case("conv_transpose_pad", rng, keras.layers.Conv2DTranspose(
        2, (2, 3), strides=(3, 2), output_padding=(1, 1), padding="same",
        use_bias=False, **f64), small)
    tensors += case("conv_transpose_wide", rng, keras.layers.Conv2DTranspose(
        2, 2, strides=3, **f64), small)
    tensors += adjoint_case("conv_transpose_dilated", rng,
                    keras.layers.Conv2DTranspose(
                        2, (2, 3), dilation_rate=(2, 1), padding="same",
                        **f64), small)
    tensors += case("conv1d_transpose", rng, keras.layers.Conv1DTranspose(
        3, 3, strides=2, padding="same", activation="tanh", **f64), seq)
    tensors += case("conv1d_transpose_pad", rng,
                    keras.layers.Conv1DTranspose(
                        2, 4, strides=3, output_padding=2, **f64), seq)
    # Bilinear up-sampling (tf.image.resize).
    tensors += case("up_bilinear", rng, keras.layers.UpSampling2D(
        (2, 3), interpolation="bilinear", **f64), (2, 3, 4, 2))
    tensors += case("up_bilinear_edge", rng, keras.layers.UpSampling2D(
        4, interpolation="bilinear", **f64), (2, 1, 3, 2))
    tensors += case("simple_rnn_seq", rng, keras.layers.SimpleRNN(
        4, return_sequences=True, **f64), seq)
    tensors += case("simple_rnn_back", rng, keras.layers.SimpleRNN(
        3, go_backwards=True, activation="relu", **f64), seq)
    tensors += case("up_bilinear_long", rng, keras.layers.UpSampling2D(
        (7, 1), interpolation="bilinear", **f64), (1, 256, 1, 1))
    tensors += case("depthwise1d", rng, keras.layers.DepthwiseConv1D(
        3, strides=2, padding="same", depth_multiplier=2, **f64), seq)
    tensors += case("depthwise1d_dilated", rng, keras.layers.DepthwiseConv1D(
        2, dilation_rate=3, activation="relu", use_bias=False, **f64), seq)
    tensors += case("separable1d", rng, keras.layers.SeparableConv1D(
        4, 3, padding="same", depth_multiplier=2, activation="relu", **f64),
        seq)
    tensors += case("separable1d_dilated", rng, keras.layers.SeparableConv1D(
        2, 2, dilation_rate=2, use_bias=False, **f64), seq)
    tensors += case("depthwise_strided_dilated", rng,
                    keras.layers.DepthwiseConv2D(
                        3, strides=2, dilation_rate=2, padding="same", **f64))
    tensors += case("separable1d_strided_dilated", rng,
                    keras.layers.SeparableConv1D(
                        3, 2, strides=2, dilation_rate=2, **f64), seq)
    tensors += case("up_bilinear_mixed", rng, keras.layers.UpSampling2D(
        (61, 1), interpolation="bilinear", **f64), (1, 10, 1, 1))
    tensors += case("up_bilinear_mixed_two", rng, keras.layers.UpSampling2D(
        (41, 1), interpolation="bilinear", **f64), (1, 2, 1, 1))
    tensors += case("time_distributed_conv", rng, keras.layers.TimeDistributed(
        keras.layers.Conv2D(4, 3, strides=2, padding="same",
                            activation="relu", **f64), **f64), (2, 3, 5, 5, 2))
    tensors += case("time_distributed_dense", rng,
                    keras.layers.TimeDistributed(keras.layers.Dense(3, **f64),
                                                 **f64), seq)
    tensors += case("rescaling", rng, keras.layers.Rescaling(
        2.0, offset=-1.0, **f64), seq)
    tensors += case("unit_normalization", rng,
                    keras.layers.UnitNormalization(**f64))
    comment = ("Keras %s (TensorFlow %s) conv and pooling layers with "
               "(height, width) windows; scripts/golden/window_layers.py"
               % (keras.__version__, tf.__version__))
    write_golden("window_layers.txt", tensors, comment)


if __name__ == "__main__":
    main()
