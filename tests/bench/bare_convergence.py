"""The `convergence_budget` preset as a bare PyTorch loop: the yardstick for sweep overhead.

Same 28 trainings as `dpsuite sweep convergence_budget seed=0` (mnist1d_mlp, 40k train samples, 5
epochs, global batch 32 ... 2048 under naive / linear / linear_warmup / sqrt, SGD momentum 0.9,
cosine schedule, evaluation at the start and after every epoch, the same data order), written
with nothing but torch and the MNIST-1D arrays: no Hydra, no results files, no suite code.

    python tests/bench/bare_convergence.py              # the bare loop: wall time and accuracy
    python tests/bench/bare_convergence.py --compare    # and the preset, and the ratio

The dataset is read from the suite's cache (generated first if missing), outside the timing.
Both sides use the same number of torch threads (``--threads``, default 1: on a machine shared
with other work, more threads than idle cores make OpenMP spin and steps many times slower).
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

REPO = Path(__file__).resolve().parents[2]
# The preset's values (tests/bench/test_sweep_overhead.py checks they still match it).
NUM_SAMPLES, DATA_SEED = 50_000, 42
BATCHES = [32 * 2**k for k in range(7)]
RULES = ["naive", "linear", "linear_warmup", "sqrt"]
EPOCHS, BASE_LR, BASE_BATCH, WARMUP_EPOCHS = 5, 0.1, 32, 1
MOMENTUM, WEIGHT_DECAY, CHECK_EVERY = 0.9, 5e-4, 10


def cache_file() -> Path:
    cache = Path(os.environ.get("DPSUITE_CACHE_DIR", "~/.cache/dpsuite")).expanduser()
    sys.path.insert(0, str(REPO))
    from dpsuite.workloads.mnist_1d import cache_path, generation_args, load_or_generate

    load_or_generate(cache, NUM_SAMPLES, DATA_SEED)  # no-op when cached
    return cache_path(cache, generation_args(NUM_SAMPLES, DATA_SEED))


def peak_lr(rule: str, batch: int) -> float:
    ratio = batch / BASE_BATCH
    return {"naive": 1.0, "linear": ratio, "linear_warmup": ratio, "sqrt": math.sqrt(ratio)}[
        rule
    ] * BASE_LR


def lr_at(step: int, rule: str, batch: int, steps_per_epoch: int, total: int) -> float:
    peak = peak_lr(rule, batch)
    # Gradual warmup only rises: none at the base batch, where the peak is base_lr.
    rises = rule == "linear_warmup" and peak > BASE_LR
    warm = min(round(WARMUP_EPOCHS * steps_per_epoch), total) if rises else 0
    if step < warm:
        return BASE_LR + (peak - BASE_LR) * step / warm
    progress = min(max((step - warm) / max(total - warm, 1), 0.0), 1.0)
    return peak * 0.5 * (1.0 + math.cos(math.pi * progress))


def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    with torch.no_grad():
        correct = sum(
            int((model(x[i : i + 4096]).argmax(1) == y[i : i + 4096]).sum())
            for i in range(0, len(x), 4096)
        )
    model.train()
    return correct / len(x)


def train_one(data, rule: str, batch: int, seed: int) -> float | None:
    """One training; the final eval accuracy, or None when the loss stopped being finite."""
    x, y, x_test, y_test = data
    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Linear(40, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)
    )
    opt = torch.optim.SGD(
        model.parameters(), lr=BASE_LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY
    )
    loss_fn = nn.CrossEntropyLoss()
    steps_per_epoch = len(x) // batch
    total = steps_per_epoch * EPOCHS
    evaluate(model, x_test, y_test)
    step, acc = 0, None
    for epoch in range(EPOCHS):
        g = torch.Generator()
        g.manual_seed(seed + epoch)  # the order DistributedSampler gives
        perm = torch.randperm(len(x), generator=g)
        for k in range(steps_per_epoch):
            idx = perm[k * batch : (k + 1) * batch]
            for group in opt.param_groups:
                group["lr"] = lr_at(step, rule, batch, steps_per_epoch, total)
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x[idx]), y[idx])
            loss.backward()
            opt.step()
            step += 1
            if step % CHECK_EVERY == 0 and not math.isfinite(loss.item()):
                return None
        acc = evaluate(model, x_test, y_test)
    return acc


def bare_loop(seed: int = 0, threads: int = 1) -> tuple[float, dict[tuple[str, int], float | None]]:
    """Train all 28 configurations; returns (seconds, accuracy by (rule, batch))."""
    torch.set_num_threads(threads)
    with np.load(cache_file()) as f:
        data = tuple(torch.from_numpy(f[k]) for k in ("x", "y", "x_test", "y_test"))
    t0 = time.perf_counter()
    accs = {(r, b): train_one(data, r, b, seed) for b in BATCHES for r in RULES}
    return time.perf_counter() - t0, accs


def timed(cmd: list[str], **kw) -> tuple[float, float]:
    """Run ``cmd``; its wall time and its CPU time (user + system, children included)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, **kw)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def preset_time(results_dir: Path, seed: int = 0, threads: int = 1) -> tuple[float, float]:
    """Wall and CPU time of `dpsuite sweep convergence_budget seed=SEED` in a fresh process."""
    return timed(
        [
            sys.executable,
            "-m",
            "dpsuite",
            "sweep",
            "convergence_budget",
            f"seed={seed}",
            "force=true",
        ]
        + [f"threads_per_worker={threads}", f"results_dir={results_dir}"],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def bare_time(seed: int = 0, threads: int = 1) -> tuple[float, float]:
    """Wall and CPU time of this script's bare loop in a fresh process (imports included)."""
    return timed([sys.executable, __file__, f"--seed={seed}", f"--threads={threads}"])


def table(accs: dict[tuple[str, int], float | None]) -> str:
    lines = ["rule           " + "".join(f"{b:>7}" for b in BATCHES)]
    for r in RULES:
        cells = "".join(
            f"{'div':>7}" if accs[r, b] is None else f"{100 * accs[r, b]:7.1f}" for b in BATCHES
        )
        lines.append(f"{r:<15}{cells}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (both sides)")
    parser.add_argument("--compare", action="store_true", help="also time the preset")
    parser.add_argument("--results-dir", default="results/bench-convergence")
    parser.add_argument("--repeat", type=int, default=1, help="alternate the two this many times")
    a = parser.parse_args()
    if not a.compare:
        seconds, accs = bare_loop(a.seed, a.threads)
        print(f"bare loop: {seconds:.1f} s for {len(accs)} trainings\n{table(accs)}")
        return
    cache_file()
    for _ in range(a.repeat):  # alternating, so that a busy spell of the machine hits both
        bare_wall, bare_cpu = bare_time(a.seed, a.threads)
        wall, cpu = preset_time(Path(a.results_dir), a.seed, a.threads)
        print(
            f"wall: bare loop {bare_wall:.1f} s, preset {wall:.1f} s, ratio {wall / bare_wall:.2f}"
            f" | cpu: bare loop {bare_cpu:.1f} s, preset {cpu:.1f} s, ratio {cpu / bare_cpu:.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
