"""A bare DDP training loop in plain PyTorch (no dpsuite code): the yardstick for its overhead.

    python tests/bench/reference/bare_ddp.py --model mlp --workers 2 --batch 32 --steps 300

N processes (torch.multiprocessing, FileStore rendezvous, gloo), each with cores/N threads,
train the same model as dpsuite's workload of that name (mlp = mnist1d_mlp, resnet18 =
cifar_resnet at width 64, resnet50 = torchvision's at 224 px, uint8 images normalised inside
as dpsuite's `torchvision` workload does) with SGD (momentum 0.9, weight decay 5e-4) on random
data of the same shape and dtype. After ``--warmup`` steps, ``--steps`` steps are timed on each
rank; the throughput is global samples / the slowest rank's time. Each step is also timed on
its own, for a noise-robust figure: global batch / the median step time (max across ranks per
step). Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import local_ranks  # beside this script: both bare loops start their ranks alike
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class ResNet18(nn.Module):
    """CIFAR ResNet-18 taking uint8 images (normalised inside, as dpsuite's model does)."""

    def __init__(self, width: int = 64) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU()
        )
        layers, cin = [], width
        for i, stride in enumerate((1, 2, 2, 2)):
            cout = width * 2**i
            layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
            cin = cout
        self.stages = nn.Sequential(*layers)
        self.head = nn.Linear(cin, 10)
        self.mean = torch.tensor((125.3, 123.0, 113.9)).view(1, 3, 1, 1)
        self.std = torch.tensor((63.0, 62.1, 66.7)).view(1, 3, 1, 1)

    def forward(self, x):
        w = self.head.weight
        x = (x.to(w.dtype) - self.mean.to(w)) / self.std.to(w)
        x = self.stages(self.stem(x))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


class ImageNetResNet50(nn.Module):
    """torchvision's ResNet-50 taking uint8 images, normalised with ImageNet's mean and std."""

    def __init__(self) -> None:
        super().__init__()
        import torchvision

        self.model = torchvision.models.resnet50(weights=None, num_classes=1000)
        self.mean = torch.tensor((123.675, 116.28, 103.53)).view(1, 3, 1, 1)
        self.std = torch.tensor((58.395, 57.12, 57.375)).view(1, 3, 1, 1)

    def forward(self, x):
        w = self.model.fc.weight
        return self.model((x.to(w.dtype) - self.mean.to(w)) / self.std.to(w))


def build(model: str, n: int) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    if model == "resnet50":
        x = torch.randint(0, 256, (n, 3, 224, 224), dtype=torch.uint8, generator=g)
        return ImageNetResNet50(), x, torch.randint(0, 1000, (n,), generator=g)
    y = torch.randint(0, 10, (n,), generator=g)
    if model == "mlp":
        net = nn.Sequential(
            nn.Linear(40, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)
        )
        return net, torch.randn(n, 40, generator=g), y
    x = torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8, generator=g)
    return ResNet18(), x, y


def timed_loop(rank: int, args: argparse.Namespace) -> tuple[float, list[float]]:
    """Train; this rank's time for the timed steps, and each step's (DDP dies with this frame)."""
    torch.manual_seed(0)
    model, x, y = build(args.model, args.samples)
    net = DDP(model) if args.workers > 1 else model
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    perm = torch.randperm(args.samples, generator=torch.Generator().manual_seed(1))
    per_step = args.batch * args.workers
    steps_per_epoch = args.samples // per_step

    def step(i: int) -> None:
        start = (i % steps_per_epoch) * per_step + rank * args.batch
        idx = perm[start : start + args.batch]
        opt.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(net(x[idx]), y[idx]).backward()
        opt.step()

    for i in range(args.warmup):
        step(i)
    dist.barrier()
    t0 = time.perf_counter()
    steps = []
    for i in range(args.warmup, args.warmup + args.steps):
        t = time.perf_counter()
        step(i)
        steps.append(time.perf_counter() - t)
    return time.perf_counter() - t0, steps


def worker(rank: int, store: str, args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=store, rank=rank, world_size=args.workers)
    total, steps = timed_loop(rank, args)
    times = torch.tensor([total, *steps], dtype=torch.float64)
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    if rank == 0:
        global_batch = args.batch * args.workers
        result = {"model": args.model, "workers": args.workers, "batch": args.batch}
        result |= {"threads": args.threads, "steps": args.steps}
        result["samples_per_s"] = args.steps * global_batch / float(times[0])
        result["samples_per_s_at_median_step"] = global_batch / statistics.median(
            times[1:].tolist()
        )
        print(json.dumps(result), flush=True)
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=["mlp", "resnet18", "resnet50"], default="mlp")
    local_ranks.add_arguments(p)
    p.add_argument("--batch", type=int, default=32, help="per worker")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--samples", type=int, default=1600)
    local_ranks.start(worker, p.parse_args())


if __name__ == "__main__":
    main()
