"""PyTorch twin of mirrortrain's Fashion-MNIST models, for scripts/bench_cpu.sh.

Trains the same model (same layer sizes, SGD with momentum, batch and thread
count) on random data shaped like Fashion-MNIST and prints train samples/s as
one JSON line. Usage:
  python3 scripts/bench/torch_cpu.py --model mlp|cnn|resnet --batch 128 --threads 2 --steps 200

resnet is configs/fashion_mnist_resnet.yaml: a 3x3 stem with batch norm, one
basic block per stage (16, 32, 64, 128 filters at 28x28, 14x14, 7x7, 4x4;
projection shortcuts where the shape changes), global average pooling,
dropout, dense; batch norm with Keras' epsilon (1e-3) and momentum (0.99).
"""
import argparse
import json
import time

import torch
from torch import nn


def conv_bn(cin: int, cout: int, k: int, stride: int = 1) -> list:
    # padding same for odd kernels at stride 1 and 2 on even sizes.
    return [nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, bias=False),
            nn.BatchNorm2d(cout, eps=1e-3, momentum=0.01)]


class Block(nn.Module):
    """A basic residual block: relu(main(x) + shortcut(x))."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.main = nn.Sequential(*conv_bn(cin, cout, 3, stride), nn.ReLU(),
                                  *conv_bn(cout, cout, 3))
        self.shortcut = (nn.Sequential(*conv_bn(cin, cout, 1, stride))
                         if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x):
        return torch.relu(self.main(x) + self.shortcut(x))


def build(model: str) -> nn.Module:
    if model == "resnet":
        return nn.Sequential(
            *conv_bn(1, 16, 3), nn.ReLU(),
            Block(16, 16, 1), Block(16, 32, 2), Block(32, 64, 2),
            Block(64, 128, 2),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.3),
            nn.Linear(128, 10))
    if model == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(),
                             nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
    return nn.Sequential(
        nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(7 * 7 * 64, 1024), nn.ReLU(), nn.Dropout(0.4),
        nn.Linear(1024, 10))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="mlp")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    net = build(a.model)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    # NCHW for PyTorch's native convolution layout.
    x = torch.rand(a.batch, 1, 28, 28)
    y = torch.randint(0, 10, (a.batch,))
    for i in range(a.warmup + a.steps):
        if i == a.warmup:
            start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()
    seconds = time.perf_counter() - start
    print(json.dumps({"framework": "pytorch", "version": torch.__version__,
                      "model": a.model, "batch": a.batch, "threads": a.threads,
                      "samples_per_sec": a.steps * a.batch / seconds}))


if __name__ == "__main__":
    main()
