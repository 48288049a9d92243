"""configs/fortunes_gpt.yaml in PyTorch, next to mirrortrain, in one run.

Trains the config's model with both and prints, at the same step count, the
held-out per-byte loss (nats) of each, their difference and each one's
training tokens/s on the CPU (both on every core of the machine: mirrortrain
uses them all, PyTorch is given the same count).

The PyTorch twin is the same model, data split, initialisation scheme and
recipe, read from the config where it is data:
  * data: the config's files concatenated in order, the last
    validation_fraction of the bytes held out, non-overlapping windows of
    sequence_length with next-byte targets, windows reshuffled every epoch
    (its own RNG: the order differs from mirrortrain's, the recipe not);
  * model: token embedding U(-0.05, 0.05); learned positions, Keras
    glorot_uniform; per block (pre-norm): x + attention(layer_norm(x)),
    x + dense(gelu(dense(layer_norm(x)))); a final layer norm and a dense
    head. Kernels glorot_uniform with Keras' fans (attention projections
    with those Keras 3.15's EinsumDense gives its [width, heads, key_dim]
    and [heads, key_dim, width] kernels: width and heads * key_dim),
    biases zero, layer norm epsilon 1e-3, exact (erf) gelu;
  * AdamW with Keras' defaults (betas 0.9/0.999, epsilon 1e-7), the
    config's weight decay and exclusions (by name, as mirrortrain matches
    them), the config's clipping by global norm and its cosine schedule with
    linear warmup from 0 (the first step at learning rate 0, as Keras);
  * loss: mean per-token cross-entropy of the batch.
Keras adds epsilon to sqrt(v) before bias correction, PyTorch after: with
epsilon 1e-7 the difference is far below the loss's noise.

Usage (from the repository root, after building):
  python3 scripts/bench/torch_gpt.py [--steps N] [--mt build/bin/mirrortrain]
Prints one JSON line per framework and a summary line.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import yaml
from torch import nn
from torch.nn import functional as F


def glorot_(tensor, shape):
    """Keras glorot_uniform for a kernel of Keras `shape`, into `tensor`."""
    receptive = int(np.prod(shape[:-2])) if len(shape) > 2 else 1
    fan_in, fan_out = shape[-2] * receptive, shape[-1] * receptive
    limit = math.sqrt(6.0 / (fan_in + fan_out))
    with torch.no_grad():
        tensor.uniform_(-limit, limit)


def linear(d_in, d_out, keras_shape=None):
    """A Dense layer: glorot kernel (Keras shape [in, out] unless given)."""
    layer = nn.Linear(d_in, d_out)
    glorot_(layer.weight, keras_shape or (d_in, d_out))
    nn.init.zeros_(layer.bias)
    return layer


class Block(nn.Module):
    def __init__(self, width, heads, key_dim, mlp_units):
        super().__init__()
        self.heads, self.key_dim = heads, key_dim
        self.layer_normalization = nn.LayerNorm(width, eps=1e-3)
        self.query = linear(width, heads * key_dim)
        self.key = linear(width, heads * key_dim)
        self.value = linear(width, heads * key_dim)
        self.attention_output = linear(heads * key_dim, width)
        self.layer_normalization_mlp = nn.LayerNorm(width, eps=1e-3)
        self.dense_up = linear(width, mlp_units)
        self.dense_down = linear(mlp_units, width)

    def forward(self, x):
        b, t, _ = x.shape
        h = self.layer_normalization(x)

        def split(p):
            return p(h).view(b, t, self.heads, self.key_dim).transpose(1, 2)

        a = F.scaled_dot_product_attention(split(self.query), split(self.key),
                                           split(self.value), is_causal=True)
        x = x + self.attention_output(a.transpose(1, 2).reshape(b, t, -1))
        h = self.layer_normalization_mlp(x)
        return x + self.dense_down(F.gelu(self.dense_up(h)))


class Gpt(nn.Module):
    def __init__(self, spec):
        super().__init__()
        self.embeddings = nn.Embedding(spec["vocab"], spec["width"])
        with torch.no_grad():
            self.embeddings.weight.uniform_(-0.05, 0.05)
        self.position_embeddings = nn.Parameter(
            torch.empty(spec["positions"], spec["width"]))
        glorot_(self.position_embeddings, (spec["positions"], spec["width"]))
        self.blocks = nn.ModuleList(
            Block(spec["width"], spec["heads"], spec["key_dim"],
                  spec["mlp_units"]) for _ in range(spec["blocks"]))
        self.layer_normalization = nn.LayerNorm(spec["width"], eps=1e-3)
        self.head = linear(spec["width"], spec["vocab"])

    def forward(self, ids):
        x = self.embeddings(ids) + self.position_embeddings[:ids.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.layer_normalization(x))


def model_spec(config):
    """The transformer's sizes, read from the config's layer list."""
    layers = config["model"]["layers"]
    emb, pos, stack = layers[0], layers[1], layers[2]
    attention = stack["layers"][0]["layers"][1]
    width = emb["output_dim"]
    heads = attention["num_heads"]
    return {"vocab": emb["input_dim"], "width": width,
            "positions": pos["sequence_length"], "heads": heads,
            "key_dim": attention.get("key_dim") or width // heads,
            "mlp_units": stack["layers"][1]["layers"][1]["units"],
            "blocks": stack.get("repeat", 1)}


def windows(config, train):
    data = config["data"]
    paths = data["path"] if isinstance(data["path"], list) else [data["path"]]
    raw = b"".join(open(p, "rb").read() for p in paths)
    n = len(raw)
    test = int(math.floor(n * data.get("validation_fraction", 0.1)))
    part = raw[:n - test] if train else raw[n - test:]
    length = data.get("sequence_length", 128)
    count = (len(part) - 1) // length
    arr = np.frombuffer(part, dtype=np.uint8).astype(np.int64)
    x = arr[:count * length].reshape(count, length)
    y = arr[1:count * length + 1].reshape(count, length)
    return torch.from_numpy(x), torch.from_numpy(y)


def learning_rate(opt_config, step):
    lr = opt_config["learning_rate"]
    sched = opt_config.get("schedule", {"name": "constant"})
    warmup = sched.get("warmup_steps", 0)
    if step < warmup:
        return base_rate(lr, sched, 0) * step / warmup
    return base_rate(lr, sched, step - warmup)


def base_rate(lr, sched, step):
    if sched["name"] == "constant":
        return lr
    if sched["name"] != "cosine_decay":
        sys.exit("torch_gpt.py: only constant and cosine_decay schedules")
    decay, alpha = sched.get("decay_steps", 1000), sched.get("alpha", 0.0)
    cosine = 0.5 * (1 + math.cos(math.pi * min(step, decay) / decay))
    return lr * ((1 - alpha) * cosine + alpha)


def torch_run(config, steps, threads, seed):
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = Gpt(model_spec(config))
    opt_config = config["optimizer"]
    excluded = opt_config.get("exclude_from_weight_decay", [])
    # mirrortrain's names for the same variables, for the exclusions.
    keras_words = {"embeddings": "embeddings", "position": "embeddings",
                   "layer_normalization": "layer_normalization",
                   "bias": "bias"}
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        words = [w for k, w in keras_words.items() if k in name]
        if name.endswith(".bias"):
            words.append("bias")
        if any(e in w for w in words for e in excluded):
            no_decay.append(p)
        else:
            decay.append(p)
    opt = torch.optim.AdamW(
        [{"params": decay,
          "weight_decay": opt_config.get("weight_decay", 0.004)},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=0.0, betas=(0.9, 0.999), eps=1e-7)
    clip = opt_config.get("clip_global_norm")
    x, y = windows(config, True)
    batch = config["data"]["global_batch_size"]
    per_epoch = len(x) // batch
    order = rng.permutation(len(x))
    step, seconds, timed = 0, 0.0, 0
    warmup = min(10, steps // 10)  # Untimed first steps (allocator warm-up).
    while step < steps:
        i = step % per_epoch
        if i == 0 and step > 0:
            order = rng.permutation(len(x))
        rows = torch.from_numpy(order[i * batch:(i + 1) * batch])
        start = time.perf_counter()
        for g in opt.param_groups:
            g["lr"] = learning_rate(opt_config, step)
        opt.zero_grad(set_to_none=True)
        logits = model(x[rows])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                               y[rows].reshape(-1))
        loss.backward()
        if clip:
            nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        if step >= warmup:
            seconds += time.perf_counter() - start
            timed += 1
        step += 1
    tx, ty = windows(config, False)
    total, tokens = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(tx), 256):
            logits = model(tx[i:i + 256])
            total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                     ty[i:i + 256].reshape(-1),
                                     reduction="sum").item()
            tokens += ty[i:i + 256].numel()
    return {"framework": "pytorch " + torch.__version__, "steps": steps,
            "test_loss": total / tokens,
            "tokens_per_sec": timed * batch * x.shape[1] / seconds,
            "train_seconds": seconds}


def mirrortrain_run(binary, config_path, steps):
    run_dir = tempfile.mkdtemp(prefix="torch_gpt_mt_")
    start = time.perf_counter()
    subprocess.run([binary, "train", "--config", config_path, "--run_dir",
                    run_dir, "--set", "train.steps=%d" % steps, "--set",
                    "checkpoint.every_steps=0", "--set", "ema.decay=null"],
                   check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    test_loss, rates = None, []
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            m = json.loads(line)
            if m.get("split") == "test":
                test_loss = m["loss"]
            elif "tokens_per_sec" in m:
                rates.append(m["tokens_per_sec"])
    # The first window includes start-up; the rest are steady state.
    steady = rates[1:] or rates
    return {"framework": "mirrortrain", "steps": steps, "test_loss": test_loss,
            "tokens_per_sec": sum(steady) / len(steady),
            "wall_seconds": wall, "run_dir": run_dir}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--config", default="configs/fortunes_gpt.yaml")
    p.add_argument("--steps", type=int, default=None,
                   help="default: the config's train.steps")
    p.add_argument("--mt", default="build/bin/mirrortrain")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--skip_mirrortrain", action="store_true")
    a = p.parse_args()
    with open(a.config) as f:
        config = yaml.safe_load(f)
    steps = a.steps or config["train"]["steps"]
    results = []
    if not a.skip_mirrortrain:
        results.append(mirrortrain_run(a.mt, a.config, steps))
        print(json.dumps(results[-1]), flush=True)
    results.append(torch_run(config, steps, a.threads, a.seed))
    print(json.dumps(results[-1]), flush=True)
    if len(results) == 2:
        mt, pt = results
        print("held-out loss after %d steps: mirrortrain %.4f, pytorch %.4f "
              "nats/byte (difference %+.4f; target within 0.03); "
              "tokens/s: mirrortrain %.0f, pytorch %.0f (%.2fx) on %d threads"
              % (steps, mt["test_loss"], pt["test_loss"],
                 mt["test_loss"] - pt["test_loss"], mt["tokens_per_sec"],
                 pt["tokens_per_sec"],
                 mt["tokens_per_sec"] / pt["tokens_per_sec"], a.threads))


if __name__ == "__main__":
    main()
