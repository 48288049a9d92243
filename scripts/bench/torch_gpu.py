"""PyTorch twin of mirrortrain's GPU benchmarks, for scripts/bench_gpu.sh.

Same models, batches, optimizer and (for time-to-accuracy) schedule as
configs/fashion_mnist_cnn_gpu.yaml and configs/mlp_4096_gpu.yaml. Prints one
JSON line per measurement. Timing: CUDA events after torch.cuda.synchronize
on a GPU (wall clock on the CPU), warm-up steps excluded. Eager PyTorch by
default; --compile wraps the model in torch.compile (default mode: Inductor,
no CUDA graphs), compiled during the warm-up steps. The input batch is copied
from pinned host memory each step (non_blocking), as mirrortrain's input
pipeline does.

Precision (--cnn_precision, --mlp_precision): fp32 and tf32 set PyTorch's
matmul and cuDNN TensorFloat-32 switches; bf16 is mixed_bfloat16 as in
mirrortrain: torch.autocast(dtype=torch.bfloat16) around the forward pass and
the loss (bf16 activations and matrix-product and convolution operands, f32
accumulation, the loss itself in f32), f32 weights and f32 optimizer, TF32 off.

  python3 scripts/bench/torch_gpu.py --bench cnn_rate,cnn_tta,mlp,matmul
  python3 scripts/bench/torch_gpu.py --bench mlp --mlp_precision bf16 --compile
  python3 scripts/bench/torch_gpu.py --device cpu --smoke   # tiny sizes, any machine

Benchmarks (--bench, comma separated):
  cnn_rate  TF tutorial CNN, batch 256, random Fashion-MNIST-shaped data: train samples/s
  cnn_tta   the CNN on Fashion-MNIST (--data_dir, IDX .gz): seconds until the test
            accuracy (plain weights, evaluated once per epoch) reaches --target
  mlp       784-4096x4-10 relu MLP, batch 4096, --mlp_precision (tf32 or bf16):
            samples/s and achieved TFLOP/s
  matmul    torch.matmul rate (square 8192, and the MLP's 4096^3 layer shape), tf32, fp32
            and bf16 (bf16 tensors); never compiled
  config_rate  the model of a config's layer list (--config_json: `mirrortrain config
            --json`; scripts/bench/torch_config.py) at its global batch, --precision,
            random data of its input's shape: train samples/s (and tokens/s), FLOPs
            per sample (torch.utils.flop_counter, forward and backward)
"""
import argparse
import gzip
import json
import math
import os
import statistics
import struct
import time

import torch
from torch import nn
from torch.nn import functional as F

# The MLP of configs/mlp_4096_gpu.yaml.
MLP_IN, MLP_HIDDEN, MLP_CLASSES = 784, [4096, 4096, 4096, 4096], 10


def set_precision(precision: str) -> None:
    """fp32: full f32 products and convolutions; tf32: TensorFloat-32 for both
    (mirrortrain's `precision` covers MatMul and Conv2D's GEMMs); bf16: TF32
    off, the bf16 products come from autocast()."""
    tf32 = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32


def autocast(device: torch.device, precision: str):
    """For bf16, autocast to bfloat16 around the forward pass and the loss
    (as TensorFlow's mixed_bfloat16: bf16 product and convolution operands,
    f32 accumulation, f32 weights; autocast keeps the loss in f32); a no-op
    otherwise."""
    return torch.autocast(device.type, dtype=torch.bfloat16,
                          enabled=precision == "bf16")


def keras_init(net: nn.Module) -> nn.Module:
    """Glorot-uniform kernels and zero biases, as Keras and mirrortrain."""
    for m in net.modules():
        if isinstance(m, (nn.Linear, nn.Conv2d)):
            nn.init.xavier_uniform_(m.weight)
            nn.init.zeros_(m.bias)
    return net


def build_cnn(dense_units: int = 1024) -> nn.Module:
    # NCHW, PyTorch's native convolution layout; 'same' padding for 5x5.
    return keras_init(nn.Sequential(
        nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(7 * 7 * 64, dense_units), nn.ReLU(),
        nn.Dropout(0.4), nn.Linear(dense_units, 10)))


def build_mlp(hidden: list) -> nn.Module:
    layers, width = [nn.Flatten()], MLP_IN
    for units in hidden:
        layers += [nn.Linear(width, units), nn.ReLU()]
        width = units
    layers.append(nn.Linear(width, MLP_CLASSES))
    return keras_init(nn.Sequential(*layers))


def mlp_flops_per_example(hidden: list) -> int:
    """GEMM flops of one training example: forward, weight gradient and input
    gradient (2*in*out each) per layer, less the first layer's input gradient
    (the input needs none)."""
    dims = [MLP_IN] + hidden + [MLP_CLASSES]
    macs = [i * o for i, o in zip(dims[:-1], dims[1:])]
    return 2 * (3 * sum(macs) - macs[0])


class Timer:
    """Seconds between start() and stop(): CUDA events on a GPU, wall clock
    on the CPU."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def start(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()
            self.begin = torch.cuda.Event(enable_timing=True)
            self.end = torch.cuda.Event(enable_timing=True)
            self.begin.record()
        else:
            self.t0 = time.perf_counter()

    def stop(self) -> float:
        if self.cuda:
            self.end.record()
            self.end.synchronize()
            return self.begin.elapsed_time(self.end) / 1e3
        return time.perf_counter() - self.t0


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def pinned(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    return t.pin_memory() if device.type == "cuda" else t


def train_rate(net: nn.Module, x_host: torch.Tensor, y_host: torch.Tensor,
               device: torch.device, steps: int, warmup: int, repeat: int,
               lr: float, precision: str, compiled: bool,
               opt: torch.optim.Optimizer = None) -> tuple:
    """samples/s of `repeat` timed windows of `steps` steps after `warmup`
    steps (at least one with `compiled`: it compiles), and the warm-up's
    seconds; the batch is copied host -> device every step. The optimizer is
    SGD with momentum 0.9 at `lr` unless `opt` is given; the loss is the mean
    cross-entropy of the logits' last axis (per example or per token)."""
    if opt is None:
        opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    net.train()
    model = torch.compile(net) if compiled else net

    def step() -> None:
        x = x_host.to(device, non_blocking=True)
        y = y_host.to(device, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        with autocast(device, precision):
            logits = model(x)
            loss = loss_fn(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()

    t0 = time.perf_counter()
    for _ in range(max(warmup, 1) if compiled else warmup):
        step()
    sync(device)
    warmup_seconds = time.perf_counter() - t0
    timer, rates = Timer(device), []
    for _ in range(repeat):
        timer.start()
        for _ in range(steps):
            step()
        rates.append(steps * x_host.shape[0] / timer.stop())
    return rates, warmup_seconds


def common(a: argparse.Namespace, device: torch.device,
           compiled: bool = None) -> dict:
    """Fields of every line; `compile` is --compile unless `compiled` says
    otherwise (matmul is never compiled)."""
    out = {"framework": "pytorch", "version": torch.__version__,
           "device": str(device),
           "compile": a.compile if compiled is None else compiled}
    # The flag as set (on CPUs it changes nothing, and says so in a dry run).
    out["cudnn_benchmark"] = torch.backends.cudnn.benchmark
    if device.type == "cuda":
        out["gpu"] = torch.cuda.get_device_name(device)
    return out


def rate_line(a, device, bench: str, model: str, batch: int, precision: str,
              steps: int, warmup: int, rates: list, warmup_s: float) -> dict:
    """The fields every train-rate line has (train_rate's windows, their
    median as samples_per_sec)."""
    return {**common(a, device), "bench": bench, "model": model,
            "batch": batch, "precision": precision, "steps": steps,
            "warmup": warmup, "warmup_seconds": round(warmup_s, 2),
            "windows": [round(r, 1) for r in rates],
            "samples_per_sec": round(statistics.median(rates), 1)}


def bench_cnn_rate(a, device) -> dict:
    batch = 8 if a.smoke else a.cnn_batch
    steps, warmup, repeat = (2, 1, 2) if a.smoke else (a.steps, a.warmup, a.repeat)
    set_precision(a.cnn_precision)
    torch.manual_seed(0)
    net = build_cnn(64 if a.smoke else 1024).to(device)
    x = pinned(torch.rand(batch, 1, 28, 28), device)
    y = pinned(torch.randint(0, 10, (batch,)), device)
    rates, warmup_s = train_rate(net, x, y, device, steps, warmup, repeat,
                                 lr=0.1, precision=a.cnn_precision,
                                 compiled=a.compile)
    return rate_line(a, device, "cnn_rate", "cnn", batch, a.cnn_precision,
                     steps, warmup, rates, warmup_s)


def step_flops(net: nn.Module, x: torch.Tensor, y: torch.Tensor,
               precision: str) -> int:
    """Floating-point operations of one training step's forward and backward
    passes (torch.utils.flop_counter: matrix products, convolutions and
    attention, 2 per multiply-add), uncompiled, on `net`'s device."""
    from torch.utils.flop_counter import FlopCounterMode
    device = next(net.parameters()).device
    x, y = x.to(device), y.to(device)
    counter = FlopCounterMode(display=False)
    with counter:
        with autocast(device, precision):
            logits = net(x)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
    net.zero_grad(set_to_none=True)
    return counter.get_total_flops()


def bench_config_rate(a, device) -> dict:
    """The model of a resolved config (--config_json, from `mirrortrain
    config --json`; scripts/bench/torch_config.py) at the config's global
    batch: train samples/s (tokens/s for text), and its FLOPs per sample."""
    import torch_config
    with open(a.config_json) as f:
        config = json.load(f)
    torch.manual_seed(0)
    net, kind, shape = torch_config.build(config)
    net = net.to(device)
    batch = 4 if a.smoke else config["data"]["global_batch_size"]
    steps, warmup, repeat = (2, 1, 2) if a.smoke else (a.steps, a.warmup, a.repeat)
    set_precision(a.precision)
    if kind == "tokens":
        vocab = config["model"]["layers"][0]["input_dim"]
        x = pinned(torch.randint(0, vocab, (batch,) + shape), device)
        y = pinned(torch.randint(0, vocab, (batch,) + shape), device)
    else:
        x = pinned(torch.rand((batch,) + shape), device)
        classes = config["model"]["layers"][-1]["units"]
        y = pinned(torch.randint(0, classes, (batch,)), device)
    flops = step_flops(net, x, y, a.precision)
    opt = torch_config.optimizer(config, net.parameters())
    rates, warmup_s = train_rate(net, x, y, device, steps, warmup, repeat,
                                 lr=0.0, precision=a.precision,
                                 compiled=a.compile, opt=opt)
    rate = statistics.median(rates)
    out = {**rate_line(a, device, "config_rate", a.model, batch, a.precision,
                       steps, warmup, rates, warmup_s),
           "flops_per_sample": flops / batch,
           "tflops": round(rate * flops / batch / 1e12, 3)}
    if kind == "tokens":
        out["tokens_per_sample"] = shape[0]
        out["tokens_per_sec"] = round(rate * shape[0], 1)
    return out


def read_idx(path: str) -> torch.Tensor:
    """An IDX file (.gz or raw) as a uint8 tensor of its shape."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    zero, dtype, rank = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype != 0x08:
        raise ValueError(f"{path}: not a uint8 IDX file")
    shape = struct.unpack(f">{rank}I", data[4:4 + 4 * rank])
    body = data[4 + 4 * rank:]
    try:
        import numpy as np
        flat = torch.from_numpy(np.frombuffer(body, dtype=np.uint8).copy())
    except ImportError:  # torch alone suffices
        flat = torch.frombuffer(bytearray(body), dtype=torch.uint8)
    return flat.reshape(shape)


def load_split(data_dir: str, prefix: str) -> tuple:
    def find(name: str) -> str:
        for candidate in (name + ".gz", name):
            path = os.path.join(data_dir, candidate)
            if os.path.exists(path):
                return path
        raise FileNotFoundError(f"{data_dir}: no {name}[.gz]")
    images = read_idx(find(f"{prefix}-images-idx3-ubyte"))
    labels = read_idx(find(f"{prefix}-labels-idx1-ubyte"))
    # Pixels p / 255 in [0, 1], as mirrortrain's pipeline.
    return images.float().div_(255.0).unsqueeze(1), labels.long()


def lr_at(step: int, lr: float, warmup: int, decay_steps: int) -> float:
    """mirrortrain's (Keras') cosine_decay with linear warm-up, alpha 0."""
    if step < warmup:
        return lr * step / warmup
    s = min(step - warmup, decay_steps)
    return lr * 0.5 * (1.0 + math.cos(math.pi * s / decay_steps))


def bench_cnn_tta(a, device) -> dict:
    t0 = time.perf_counter()  # Data loading and the CUDA context count.
    set_precision(a.cnn_precision)
    torch.manual_seed(1)
    x_train, y_train = load_split(a.data_dir, "train")
    x_test, y_test = load_split(a.data_dir, "t10k")
    batch, epochs = a.cnn_batch, a.max_epochs
    if a.smoke:
        x_train, y_train = x_train[:512], y_train[:512]
        x_test, y_test = x_test[:256], y_test[:256]
        batch, epochs = 64, 1
    n = x_train.shape[0]
    steps_per_epoch = -(-n // batch)  # drop_remainder: false
    # Learning rate and schedule of configs/fashion_mnist_cnn_gpu.yaml.
    lr, warmup, decay_steps = a.lr, a.warmup_steps, a.decay_steps
    # The training split lives on the GPU (188 MB) and each batch is
    # gathered there: no host copy per step, so the host never waits for
    # the GPU and queues ahead (a per-step copy from pageable memory made
    # it wait every step).
    x_train, y_train = x_train.to(device), y_train.to(device)
    x_test, y_test = x_test.to(device), y_test.to(device)
    net = build_cnn(64 if a.smoke else 1024).to(device)
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    model = torch.compile(net) if a.compile else net  # Compiles in epoch 1.
    curve, reached, step = [], None, 0
    for epoch in range(1, epochs + 1):
        net.train()
        order = torch.randperm(n).to(device)
        for b in range(steps_per_epoch):
            idx = order[b * batch:(b + 1) * batch]
            xb, yb = x_train[idx], y_train[idx]
            for g in opt.param_groups:
                g["lr"] = lr_at(step, lr, warmup, decay_steps)
            opt.zero_grad(set_to_none=True)
            with autocast(device, a.cnn_precision):
                loss = loss_fn(model(xb), yb)
            loss.backward()
            opt.step()
            step += 1
        net.eval()
        correct = 0
        with torch.no_grad(), autocast(device, a.cnn_precision):
            for b in range(0, x_test.shape[0], 1000):
                logits = model(x_test[b:b + 1000])
                correct += (logits.argmax(1) == y_test[b:b + 1000]).sum().item()
        accuracy = correct / x_test.shape[0]
        seconds = time.perf_counter() - t0
        curve.append({"epoch": epoch, "step": step, "accuracy": accuracy,
                      "seconds": round(seconds, 2)})
        if accuracy >= a.target:
            reached = curve[-1]
            break
    return {**common(a, device), "bench": "cnn_tta", "model": "cnn",
            "batch": batch, "precision": a.cnn_precision, "weights": "plain",
            "target": a.target, "reached": reached is not None,
            "epoch": reached["epoch"] if reached else None,
            "seconds": reached["seconds"] if reached else None,
            "best_accuracy": max(c["accuracy"] for c in curve),
            "timing": "from before data loading (incl. CUDA context) to the end of the crossing eval",
            "schedule": {"lr": lr, "momentum": 0.9, "warmup_steps": warmup,
                         "cosine_decay_steps": decay_steps,
                         "momentum_form": "pytorch (v = m*v + g; w -= lr*v)"},
            "curve": curve}


def bench_mlp(a, device) -> dict:
    hidden = [64, 64] if a.smoke else MLP_HIDDEN
    batch = 32 if a.smoke else a.mlp_batch
    steps, warmup, repeat = (2, 1, 2) if a.smoke else (a.mlp_steps, a.warmup, a.repeat)
    set_precision(a.mlp_precision)
    torch.manual_seed(0)
    net = build_mlp(hidden).to(device)
    x = pinned(torch.rand(batch, MLP_IN), device)
    y = pinned(torch.randint(0, MLP_CLASSES, (batch,)), device)
    rates, warmup_s = train_rate(net, x, y, device, steps, warmup, repeat,
                                 lr=0.01, precision=a.mlp_precision,
                                 compiled=a.compile)
    rate = statistics.median(rates)
    flops = mlp_flops_per_example(hidden)
    return {**rate_line(a, device, "mlp", "mlp", batch, a.mlp_precision,
                        steps, warmup, rates, warmup_s),
            "hidden": hidden, "gflop_per_example": flops / 1e9,
            "tflops": round(rate * flops / 1e12, 2)}


def matmul_rate(m: int, n: int, k: int, precision: str, device, iters: int,
                warmup: int) -> float:
    """TFLOP/s of torch.matmul: f32 tensors for tf32 and fp32, bf16 tensors
    (bf16 result) for bf16."""
    set_precision(precision)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    a = torch.randn(m, k, device=device, dtype=dtype)
    b = torch.randn(k, n, device=device, dtype=dtype)
    c = torch.empty(m, n, device=device, dtype=dtype)
    for _ in range(warmup):
        torch.matmul(a, b, out=c)
    timer = Timer(device)
    timer.start()
    for _ in range(iters):
        torch.matmul(a, b, out=c)
    return 2.0 * m * n * k * iters / timer.stop() / 1e12


def bench_matmul(a, device) -> list:
    shapes = [(256, 256, 256)] if a.smoke else [(8192, 8192, 8192), (4096, 4096, 4096)]
    iters, warmup = (2, 1) if a.smoke else (a.matmul_iters, 5)
    out = []
    for m, n, k in shapes:
        for precision in ("tf32", "fp32", "bf16"):
            tflops = matmul_rate(m, n, k, precision, device, iters, warmup)
            out.append({**common(a, device, compiled=False), "bench": "matmul",
                        "m": m, "n": n, "k": k, "precision": precision,
                        "iters": iters, "tflops": round(tflops, 2)})
    return out


def main() -> None:
    p = argparse.ArgumentParser(
        description="PyTorch side of scripts/bench_gpu.sh: one JSON line per measurement.")
    p.add_argument("--bench", default="cnn_rate,cnn_tta,mlp,matmul",
                   help="comma-separated: cnn_rate, cnn_tta, mlp, matmul, config_rate")
    p.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    p.add_argument("--smoke", action="store_true",
                   help="tiny sizes and step counts, to check the script end to end")
    p.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist",
                   help="Fashion-MNIST IDX files (.gz or raw)")
    p.add_argument("--cnn_batch", type=int, default=256)
    p.add_argument("--cnn_precision", default="fp32", choices=["fp32", "tf32", "bf16"],
                   help="matmul and cuDNN precision of the CNN (the config's `precision`; "
                        "bf16: autocast to bfloat16)")
    p.add_argument("--steps", type=int, default=200, help="CNN steps per timed window")
    p.add_argument("--mlp_batch", type=int, default=4096)
    p.add_argument("--mlp_precision", default="tf32", choices=["tf32", "bf16"],
                   help="precision of the MLP (bf16: autocast to bfloat16)")
    p.add_argument("--mlp_steps", type=int, default=50, help="MLP steps per timed window")
    p.add_argument("--cudnn_benchmark", action="store_true",
                   help="torch.backends.cudnn.benchmark = True: cuDNN times its "
                        "convolution algorithms per shape and keeps the fastest "
                        "(off by default in PyTorch)")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile the model (default mode) for cnn_rate, cnn_tta "
                        "and mlp; the warm-up steps compile it")
    p.add_argument("--warmup", type=int, default=20, help="untimed steps first")
    p.add_argument("--repeat", type=int, default=3, help="timed windows (median reported)")
    p.add_argument("--matmul_iters", type=int, default=50)
    p.add_argument("--config_json",
                   help="config_rate: the resolved config (mirrortrain config --json)")
    p.add_argument("--model", default="config",
                   help="config_rate: the name its lines carry (e.g. resnet, gpt)")
    p.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "bf16"],
                   help="config_rate's precision (bf16: autocast to bfloat16)")
    p.add_argument("--target", type=float, default=0.916, help="cnn_tta test accuracy")
    p.add_argument("--max_epochs", type=int, default=10, help="cnn_tta gives up after")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--warmup_steps", type=int, default=100)
    p.add_argument("--decay_steps", type=int, default=2250)
    a = p.parse_args()
    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("torch_gpu.py: CUDA is not available (use --device cpu --smoke to test)")
    if device.type == "cpu":
        torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    if a.cudnn_benchmark:
        torch.backends.cudnn.benchmark = True
    benches = {"cnn_rate": bench_cnn_rate, "cnn_tta": bench_cnn_tta,
               "mlp": bench_mlp, "matmul": bench_matmul,
               "config_rate": bench_config_rate}
    for name in a.bench.split(","):
        if name not in benches:
            raise SystemExit(f"torch_gpu.py: unknown benchmark '{name}'")
        result = benches[name](a, device)
        for line in result if isinstance(result, list) else [result]:
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
