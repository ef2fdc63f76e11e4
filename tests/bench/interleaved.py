"""The suite's training step against a bare DDP step, in the same processes, interleaved.

Each rank builds the run exactly as ``dpsuite run`` does (``dpsuite.engine.train.setup`` and
``calibrate``) and, beside it, a nanoGPT-like loop on the same workload's model (built with
the same seed), data and optimizer settings: DDP (none with one worker, as in the suite), SGD
at the run's LR of the step, index a batch (or take it from a plain DataLoader with the run's
loader settings), forward, backward, step. Denormals are flushed to zero in both
(``rank_main``).
After warm-up, blocks of ``k`` steps alternate between the two (bare-suite, suite-bare, ...)
until the time budget is spent; each block starts at a barrier. The suite's block is the
training loop's own step (``dpsuite.engine.train.loop_step``: LR from the plan, probes, timers,
gradient noise scale, the loss's cross-rank check when due); evaluations are left out of both.
A block's wall time is the slowest rank's; its CPU time is user + system of all ranks.
``k`` is a multiple of the probes' periods where that keeps blocks near the target length, so
that every suite block holds the same periodic work.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils._pytree import tree_map_only
from torch.utils.data import DataLoader, DistributedSampler

from dpsuite.conf.run_spec import RunSpec
from dpsuite.engine.batch_sources import TensorBatches
from dpsuite.engine.train import Run, calibrate, loop_step, setup
from dpsuite.runtime import distributed as dd
from dpsuite.runtime.distributed import Ranks
from tests.bench.overhead_stats import Block, block_order

MAX_PERIOD_STRETCH = 4  # blocks may grow to this many times the target to hold whole periods


@dataclass(frozen=True)
class Plan:
    warmup_steps: int  # of each side, before the first block
    block_s: float  # the target length of one block
    budget_s: float  # pairs are started until this much time has passed
    min_pairs: int
    # A/A: the "suite" side is a second bare loop (its own model and DDP), so the ratio is the
    # bench's own bias and spread, what a run of the suite's ratio cannot be told apart from.
    bare_against_bare: bool = False


class BareLoop:
    """The bare yardstick: a minimal DDP step on the run's model, data and optimizer (for a
    workload of Datasets, a plain DataLoader with the run's loader settings); with one worker,
    the same step without DDP.

    It takes the run's LR at each step, set as a training script's scheduler sets it. At the
    base LR instead (what it once took), a batch above the workload's base trains the two
    models apart: the suite's, at several times the LR, reaches denormal values sooner, whose
    arithmetic is slow on x86, and the ratio then measured the models' numbers rather than the
    suite (mnist1d_mlp 2 x 128: from 0.97 to 0.73 after some 16,000 steps)."""

    def __init__(self, run: Run) -> None:
        spec, opt = run.spec, run.spec.cfg.optimizer
        torch.manual_seed(spec.cfg.seed)
        model = run.workload.build_model().to(device=run.device, dtype=run.precision.param_dtype)
        # One worker: no DDP, as a one-GPU script has none and the suite's step has none. A
        # DDP of one rank still copies every gradient into its buckets and back: ResNet-50
        # came out at 1.026 with it, 1.002 without, on the same VM.
        self.net = DDP(model) if run.ranks.world_size > 1 else model
        self.plan = run.plan
        self.optimizer = torch.optim.SGD(
            model.parameters(),
            lr=run.plan.lr_at(0),
            momentum=opt.momentum,
            weight_decay=opt.weight_decay,
            nesterov=opt.nesterov,
        )
        self.workload, self.device = run.workload, run.device
        self.batch, self.rank, self.world = spec.per_worker_batch, run.ranks.rank, spec.workers
        self.per_step, self.seed = spec.global_batch, spec.cfg.seed
        self.source = run.source
        if isinstance(run.source, TensorBatches):
            self.batches = self.indexed(run.source.data.train_x, run.source.data.train_y)
        else:
            self.batches = self.loaded(run.source.data.train, spec.cfg.data)
        self.step = 0

    def indexed(self, x: torch.Tensor, y: torch.Tensor) -> Iterator[Any]:
        g = torch.Generator().manual_seed(self.seed)
        perm = torch.randperm(x.shape[0], generator=g)
        usable, offset = perm.numel() // self.per_step, self.rank * self.batch
        step = 0
        while True:
            start = (step % usable) * self.per_step + offset
            idx = perm[start : start + self.batch]
            yield x[idx], y[idx]
            step += 1

    def loaded(self, train: Any, cfg: Any) -> Iterator[Any]:
        """What a training script writes: DistributedSampler, a DataLoader, .to(device)."""
        sampler = DistributedSampler(train, self.world, self.rank, seed=self.seed, drop_last=True)
        workers = cfg.loader_workers
        loader = DataLoader(
            train,
            batch_size=self.batch,
            sampler=sampler,
            drop_last=True,
            num_workers=workers,
            persistent_workers=workers > 0,
            prefetch_factor=cfg.prefetch_factor if workers > 0 else None,
            multiprocessing_context="fork" if workers > 0 else None,
        )
        epoch = 0
        while True:
            sampler.set_epoch(epoch)
            for batch in loader:
                yield tree_map_only(torch.Tensor, lambda t: t.to(self.device), batch)
            epoch += 1

    def steps(self, k: int) -> None:
        net, opt = self.net, self.optimizer
        for _ in range(k):
            lr = self.plan.lr_at(self.step)
            for group in opt.param_groups:
                group["lr"] = lr
            batch = next(self.batches)
            opt.zero_grad(set_to_none=True)
            self.workload.batch_loss(net, batch).backward()
            opt.step()
            self.step += 1


class SuiteLoop:
    """The suite's side: the training loop's steps, one after another, as a run takes them."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.batches: Iterator[tuple[int, Any]] = run.replicas.batches()
        self.step = 0

    def steps(self, k: int) -> None:
        for _ in range(k):
            _, finite = loop_step(self.run, self.step, self.batches)
            if not finite:
                raise RuntimeError(f"non-finite training loss by step {self.step + 1}")
            self.step += 1


def cpu_seconds() -> float:
    """User + system time of this process, all its threads (gloo's and DDP's included), in ns
    resolution (os.times counts clock ticks: 10 ms)."""
    return time.process_time()


def timed_block(loop: BareLoop | SuiteLoop, k: int) -> tuple[float, float]:
    dist.barrier()
    t0, c0 = time.perf_counter(), cpu_seconds()
    loop.steps(k)
    return time.perf_counter() - t0, cpu_seconds() - c0


def periods(run: Run) -> list[int]:
    """The step periods of the suite's periodic work (the check, DDP timers, noise scale)."""
    cfg = run.spec.cfg
    every = [cfg.train.check_every, cfg.timing.comm_every]
    if cfg.noise_scale.enabled:
        every.append(cfg.noise_scale.every)
    return every


def block_steps(run: Run, bare: BareLoop, target_s: float) -> int:
    """Steps per block: near ``target_s`` of bare steps, whole periods where they fit."""
    wall, _ = timed_block(bare, 10)
    slowest = torch.tensor([wall / 10], dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    k = max(1, math.ceil(target_s / float(slowest)))
    for period in (math.lcm(*periods(run)), run.spec.cfg.train.check_every):
        whole = math.ceil(k / period) * period
        if whole <= MAX_PERIOD_STRETCH * k:
            return whole
    return k


def measure(run: Run, plan: Plan) -> tuple[int, list[Block]]:
    """Steps per block and the blocks (wall: slowest rank; CPU: all ranks)."""
    bare = BareLoop(run)
    suite = BareLoop(run) if plan.bare_against_bare else SuiteLoop(run)
    bare.steps(plan.warmup_steps)
    suite.steps(plan.warmup_steps)
    k = block_steps(run, bare, plan.block_s)
    sides, walls, cpus = [], [], []
    t0, pair = time.perf_counter(), 0
    while pair < plan.min_pairs or not over_budget(t0, plan.budget_s):
        for side in block_order(pair):
            wall, cpu = timed_block(bare if side == "bare" else suite, k)
            sides.append(side)
            walls.append(wall)
            cpus.append(cpu)
        pair += 1
    wall_t = torch.tensor(walls, dtype=torch.float64)
    cpu_t = torch.tensor(cpus, dtype=torch.float64)
    dist.all_reduce(wall_t, op=dist.ReduceOp.MAX)
    dist.all_reduce(cpu_t, op=dist.ReduceOp.SUM)
    blocks = [Block(s, float(w), float(c)) for s, w, c in zip(sides, wall_t, cpu_t, strict=True)]
    return k, blocks


def over_budget(t0: float, budget_s: float) -> bool:
    """Every rank's verdict alike: rank 0's clock decides."""
    flag = torch.tensor([float(time.perf_counter() - t0 > budget_s)])
    dist.broadcast(flag, 0)
    return bool(flag.item())


def rank_main(local_rank: int, init_method: str, spec: RunSpec, plan: Plan, out: Path) -> None:
    """One rank: the run as `dpsuite run` sets it up, then the interleaved blocks.

    Denormal numbers are flushed to zero on both sides: two models a bench trains for tens of
    thousands of steps reach them at different times (their batches differ), and their
    arithmetic, many times slower on x86, would then be what the ratio measures."""
    torch.set_flush_denormal(True)
    ranks = Ranks(local_rank, spec.workers, local_rank, spec.workers)
    device = dd.device_for(spec.device, local_rank, spec.workers)
    dd.init_group(spec.backend, ranks, init_method, spec.cfg.ddp.timeout_s, device)
    run = setup(spec, ranks, device, writer=None)
    calibrate(run)
    k, blocks = measure(run, plan)
    if ranks.rank == 0:
        out.write_text(json.dumps({"steps_per_block": k, "blocks": [asdict(b) for b in blocks]}))
    del run
    dd.shutdown()
