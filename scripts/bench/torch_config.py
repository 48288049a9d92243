"""PyTorch twins of mirrortrain models, built from a config's layer list.

The input is the resolved config as JSON (`mirrortrain config --config FILE
--json`), so the twin has the config's layers, widths, strides, paddings and
repeats by construction, and nothing but torch is needed (no YAML parser on
a GPU host). For speed comparisons: the initialisation is PyTorch's, not the
config's. Images run NCHW (PyTorch's native layout); 'same' padding is
TensorFlow's (the extra row or column of an odd total at the end); batch
norm takes Keras' momentum and epsilon; attention is
F.scaled_dot_product_attention (PyTorch's fused kernels).

  net, kind, input_shape = build(config)   # kind: "image" or "tokens"
"""
import copy
import math

import torch
from torch import nn
from torch.nn import functional as F

ACTIVATIONS = {
    "linear": nn.Identity, "relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh,
    "sigmoid": nn.Sigmoid, "softmax": lambda: nn.Softmax(dim=-1),
    "elu": nn.ELU, "selu": nn.SELU, "swish": nn.SiLU, "silu": nn.SiLU,
    "softplus": nn.Softplus, "leaky_relu": lambda: nn.LeakyReLU(0.2),
    "relu6": nn.ReLU6,
}

# Input shapes (NCHW without N) of the image sources.
IMAGE_SHAPES = {"fashion_mnist": (1, 28, 28), "synthetic": (1, 28, 28),
                "cifar10": (3, 32, 32)}


def activation(name: str) -> nn.Module:
    if name not in ACTIVATIONS:
        raise ValueError(f"torch_config: activation '{name}' has no twin")
    return ACTIVATIONS[name]()


def pair(v) -> tuple:
    return tuple(v) if isinstance(v, (list, tuple)) else (v, v)


def same_pads(size: tuple, kernel: tuple, stride: tuple) -> tuple:
    """TensorFlow's 'same' padding per spatial axis: (before, after)."""
    out = []
    for n, k, s in zip(size, kernel, stride):
        total = max((math.ceil(n / s) - 1) * s + k - n, 0)
        out.append((total // 2, total - total // 2))
    return tuple(out)


def window_out(size: tuple, kernel: tuple, stride: tuple, padding: str) -> tuple:
    if padding == "same":
        return tuple(math.ceil(n / s) for n, s in zip(size, stride))
    return tuple((n - k) // s + 1 for n, k, s in zip(size, kernel, stride))


def padded(pads: tuple, module: nn.Module, value: float = 0.0) -> nn.Module:
    """`module` after the padding `pads` ((top, bottom), (left, right));
    symmetric paddings of a conv go into the conv itself (see conv2d)."""
    (t, b), (l, r) = pads
    if t == b == l == r == 0:
        return module
    return nn.Sequential(nn.ConstantPad2d((l, r, t, b), value), module)


MERGES = {
    "residual": torch.add,
    "multiply": torch.mul,
    "subtract": torch.sub,
    "average": lambda a, b: (a + b) / 2,
    "maximum": torch.maximum,
    "minimum": torch.minimum,
}


class Merged(nn.Module):
    """merge(body(x), shortcut(x)), elementwise with broadcasting; a vector
    of channels or features against an image (NCHW) or a sequence gains
    axes of 1 where Keras's merge puts them (after the batch, in NHWC)."""
    def __init__(self, body: nn.Module, shortcut: nn.Module, merge, image: bool):
        super().__init__()
        self.body, self.shortcut, self.merge = body, shortcut, merge
        self.image = image

    def widen(self, t, rank):
        while t.dim() < rank:
            t = t.unsqueeze(-1) if self.image else t.unsqueeze(1)
        return t

    def forward(self, x):
        a, b = self.body(x), self.shortcut(x)
        rank = max(a.dim(), b.dim())
        return self.merge(self.widen(a, rank), self.widen(b, rank))


def merged_shape(kind, out, short_out):
    """The elementwise merge's output shape ((C, H, W) for images): Keras's
    broadcast of axes of 1, a lower rank's vector widened first."""
    rank = max(len(out), len(short_out))
    def widen(s):
        if len(s) == rank:
            return s
        if len(s) == 1:  # Channels or features.
            return s + (1,) * (rank - 1) if rank == 3 else (1,) * (rank - 1) + s
        raise ValueError(f"torch_config: {kind} branches of ranks {out} and {short_out}")
    a, b = widen(out), widen(short_out)
    if any(i != j and 1 not in (i, j) for i, j in zip(a, b)):
        raise ValueError(f"torch_config: {kind} branches differ: {out} vs {short_out}")
    return tuple(j if i == 1 else i for i, j in zip(a, b))


class PositionEmbedding(nn.Module):
    def __init__(self, length: int, width: int):
        super().__init__()
        self.table = nn.Parameter(torch.randn(length, width) * 0.02)

    def forward(self, x):
        return x + self.table[:x.shape[1]]


class SelfAttention(nn.Module):
    def __init__(self, width: int, heads: int, key_dim: int, causal: bool,
                 dropout: float, bias: bool):
        super().__init__()
        self.heads, self.key_dim, self.causal, self.dropout = heads, key_dim, causal, dropout
        self.qkv = nn.Linear(width, 3 * heads * key_dim, bias=bias)
        self.out = nn.Linear(heads * key_dim, width, bias=bias)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, self.key_dim).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(
            q, k, v, is_causal=self.causal,
            dropout_p=self.dropout if self.training else 0.0)
        return self.out(a.transpose(1, 2).reshape(b, t, -1))


class Concatenated(nn.Module):
    """[body(x), shortcut(x)] along the channels (NCHW: dim 1) or the last
    axis, as Keras concatenates NHWC's last."""
    def __init__(self, body: nn.Module, shortcut: nn.Module, dim: int):
        super().__init__()
        self.body, self.shortcut, self.dim = body, shortcut, dim

    def forward(self, x):
        return torch.cat([self.body(x), self.shortcut(x)], dim=self.dim)


class ChannelsLast(nn.Module):
    """`module` applied to an NCHW image's channel axis, as Keras's Dense
    and LayerNormalization apply to the last axis of NHWC."""
    def __init__(self, module: nn.Module):
        super().__init__()
        self.module = module

    def forward(self, x):
        # Contiguous NCHW again, so a following conv picks its usual kernels.
        return self.module(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2).contiguous()


class GlobalAveragePool(nn.Module):
    def __init__(self, keepdims: bool):
        super().__init__()
        self.keepdims = keepdims

    def forward(self, x):
        return x.mean(dim=(2, 3), keepdim=self.keepdims)


def build_layers(layers: list, shape: tuple) -> tuple:
    """nn.Sequential of `layers` for inputs of `shape` (no batch axis:
    (C, H, W) images, (T,) token ids, (T, D) sequences, (D,) vectors), and
    the output shape."""
    mods = []
    for spec in layers:
        # Any entry may repeat, as mirrortrain expands it (sequential's
        # own loop below repeats its whole list).
        times = 1 if spec["type"] == "sequential" else spec.get("repeat", 1)
        for _ in range(times):
            mod, shape = build_layer(spec, shape)
            mods.append(mod)
    return nn.Sequential(*mods), shape


def build_layer(s: dict, shape: tuple) -> tuple:
    kind = s["type"]
    if kind == "conv2d":
        c, h, w = shape
        k, st = pair(s["kernel_size"]), pair(s.get("strides", 1))
        d = pair(s.get("dilation_rate", 1))
        # A dilated window is padded and sized by its span.
        span = tuple((a - 1) * b + 1 for a, b in zip(k, d))
        pads = same_pads((h, w), span, st) if s.get("padding") == "same" else ((0, 0), (0, 0))
        symmetric = all(a == b for a, b in pads)
        conv = nn.Conv2d(c, s["filters"], k, st, bias=s.get("use_bias", True),
                         dilation=d, groups=s.get("groups", 1),
                         padding=tuple(a for a, _ in pads) if symmetric else 0)
        mod = conv if symmetric else padded(pads, conv)
        out = (s["filters"],) + window_out((h, w), span, st, s.get("padding", "valid"))
        act = s.get("activation", "linear")
        return (nn.Sequential(mod, activation(act)) if act != "linear" else mod), out
    if kind in ("max_pooling2d", "average_pooling2d"):
        c, h, w = shape
        k = pair(s.get("pool_size", 2))
        st = pair(s.get("strides") or k)
        pool = nn.MaxPool2d(k, st) if kind == "max_pooling2d" else nn.AvgPool2d(k, st)
        pads = same_pads((h, w), k, st) if s.get("padding") == "same" else ((0, 0), (0, 0))
        if kind == "average_pooling2d" and any(a or b for a, b in pads):
            raise ValueError("torch_config: 'same' average pooling has no twin")
        mod = padded(pads, pool, -math.inf)
        return mod, (c,) + window_out((h, w), k, st, s.get("padding", "valid"))
    if kind == "batch_normalization":
        momentum, eps = 1 - s.get("momentum", 0.99), s.get("epsilon", 1e-3)
        if len(shape) == 3:
            return nn.BatchNorm2d(shape[0], eps, momentum, affine=True), shape
        if len(shape) == 1:
            return nn.BatchNorm1d(shape[0], eps, momentum, affine=True), shape
        raise ValueError("torch_config: batch norm of sequences has no twin")
    if kind == "layer_normalization":
        image = len(shape) == 3  # (C, H, W): Keras normalises C.
        norm = nn.LayerNorm(shape[0] if image else shape[-1],
                            eps=s.get("epsilon", 1e-3))
        return (ChannelsLast(norm) if image else norm), shape
    if kind == "activation":
        return activation(s["activation"]), shape
    if kind == "dropout":
        return nn.Dropout(s.get("rate", 0.0)), shape
    if kind == "dense":
        image = len(shape) == 3  # (C, H, W): Keras's Dense maps C.
        lin = nn.Linear(shape[0] if image else shape[-1], s["units"],
                        bias=s.get("use_bias", True))
        act = s.get("activation", "linear")
        mod = nn.Sequential(lin, activation(act)) if act != "linear" else lin
        if image:
            return ChannelsLast(mod), (s["units"],) + shape[1:]
        return mod, shape[:-1] + (s["units"],)
    if kind == "flatten":
        return nn.Flatten(), (math.prod(shape),)
    if kind == "global_max_pooling2d":
        keep = s.get("keepdims", False)
        tail = () if keep else (nn.Flatten(),)
        return (nn.Sequential(nn.AdaptiveMaxPool2d(1), *tail),
                (shape[0], 1, 1) if keep else (shape[0],))
    if kind == "global_average_pooling2d":
        keep = s.get("keepdims", False)
        return GlobalAveragePool(keep), (shape[0], 1, 1) if keep else (shape[0],)
    if kind == "embedding":
        return nn.Embedding(s["input_dim"], s["output_dim"]), shape + (s["output_dim"],)
    if kind == "position_embedding":
        return PositionEmbedding(s["sequence_length"], shape[-1]), shape
    if kind == "multi_head_attention":
        width, heads = shape[-1], s["num_heads"]
        key_dim = s.get("key_dim") or width // heads
        return SelfAttention(width, heads, key_dim, s.get("causal", False),
                             s.get("dropout", 0.0), s.get("use_bias", True)), shape
    if kind in MERGES:
        body, out = build_layers(s["layers"], shape)
        shortcut, short_out = build_layers(s.get("shortcut") or [], shape)
        joined = merged_shape(kind, out, short_out)
        return Merged(body, shortcut, MERGES[kind], len(joined) == 3), joined
    if kind == "concatenate":
        body, out = build_layers(s["layers"], shape)
        shortcut, short_out = build_layers(s.get("shortcut") or [], shape)
        image = len(out) == 3  # (C, H, W): Keras's channels are C here.
        if len(out) != len(short_out) or (
                out[1:] != short_out[1:] if image else out[:-1] != short_out[:-1]):
            raise ValueError(f"torch_config: concatenated branches differ: {out} vs {short_out}")
        joined = ((out[0] + short_out[0],) + out[1:] if image
                  else out[:-1] + (out[-1] + short_out[-1],))
        return Concatenated(body, shortcut, 1 if image else -1), joined
    if kind == "sequential":
        mods = []
        for _ in range(s.get("repeat", 1)):
            mod, shape = build_layers(s["layers"], shape)
            mods.append(mod)
        return nn.Sequential(*mods), shape
    raise ValueError(f"torch_config: layer type '{kind}' has no twin")


def build(config: dict) -> tuple:
    """(net, kind, input_shape) for a resolved config with model.layers:
    kind "image" (float inputs of input_shape, C H W) or "tokens" (int ids
    of input_shape (T,), with vocabulary config's first layer's input_dim)."""
    layers = (config.get("model") or {}).get("layers")
    if not layers:
        raise ValueError("torch_config: the config has no model.layers")
    loss = (config.get("loss") or {}).get("name",
                                          "sparse_categorical_crossentropy")
    if loss != "sparse_categorical_crossentropy":
        raise ValueError(f"torch_config: loss '{loss}' has no twin "
                         "(the benchmarks train with CrossEntropyLoss)")
    data = config["data"]
    if data["name"] == "text":
        shape = (data["sequence_length"],)
        kind = "tokens"
    elif data["name"] in IMAGE_SHAPES:
        shape = IMAGE_SHAPES[data["name"]]
        kind = "image"
    else:
        raise ValueError(f"torch_config: data source '{data['name']}' has no twin")
    net, _ = build_layers(without_output_softmax(layers), shape)
    return net, kind, shape


def without_output_softmax(layers: list) -> list:
    """`layers` with a softmax on the output layer made linear: mirrortrain
    trains such a model on the logits before it (Keras's from_logits=False
    on TensorFlow), and CrossEntropyLoss applies the softmax itself."""
    layers = copy.deepcopy(layers)
    inner = layers
    while inner:
        last = inner[-1]
        if last.get("type") == "sequential":
            inner = last.get("layers") or []
            continue
        if last.get("activation") == "softmax":
            last["activation"] = "linear"
        break
    return layers


def optimizer(config: dict, params) -> torch.optim.Optimizer:
    """The config's optimizer with PyTorch's defaults for the rest (foreach
    updates on GPUs); Keras' l2_regularization as weight decay."""
    o = config["optimizer"]
    name, lr = o["name"], o["learning_rate"]
    if lr is None:  # piecewise_constant: its values are the rates.
        lr = o["schedule"]["values"][0]
    if name in ("sgd", "momentum"):
        return torch.optim.SGD(params, lr=lr, momentum=o.get("momentum", 0.0),
                               nesterov=o.get("nesterov", False),
                               weight_decay=2 * o.get("l2_regularization", 0.0))
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, betas=(o["beta1"], o["beta2"]),
                                eps=o["epsilon"])
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, betas=(o["beta1"], o["beta2"]),
                                 eps=o["epsilon"], weight_decay=o["weight_decay"])
    raise ValueError(f"torch_config: optimizer '{name}' has no twin")
