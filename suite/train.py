"""The training loop of one run on one rank (or on all virtual workers in simulated mode).

Reads top to bottom: set up data and model, wrap it for data parallelism, then step, check,
evaluate and record until the epochs are done or the loss stops being finite.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from suite import distributed as dd
from suite import sync
from suite.distributed import Ranks
from suite.lars import LARS, lars_param_groups
from suite.lr_rules import LRPlan
from suite.results import RunWriter
from suite.run_spec import RunSpec
from suite.sharding import all_worker_batches, steps_per_epoch, worker_batches
from suite.sync.hooks import timed
from suite.sync.measure import sync_metrics
from suite.timing import StepTimer, median, percentile, sample_indices


class LossTracker:
    """Sums training losses locally and only talks to other ranks every ``check_every`` steps."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.pending = torch.zeros(2, dtype=torch.float64, device=device)
        self.window_sum, self.window_n = 0.0, 0.0

    def add(self, loss: torch.Tensor) -> None:
        self.pending[0] += loss.detach().to(torch.float64)
        self.pending[1] += 1

    def sync(self) -> float:
        """All-reduce what is pending; returns its mean (NaN/Inf when the run diverged)."""
        total, count = dd.all_reduce_sum(self.pending.tolist(), self.device)
        self.pending.zero_()
        self.window_sum += total
        self.window_n += count
        return total / count if count else 0.0

    def take_window(self) -> float:
        """Mean loss since the last call (global across ranks)."""
        mean = self.window_sum / self.window_n if self.window_n else float("nan")
        self.window_sum, self.window_n = 0.0, 0.0
        return mean


@dataclass
class EvalLog:
    rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def last(self) -> dict[str, Any]:
        return self.rows[-1] if self.rows else {}

    def first_reaching(self, target: float) -> dict[str, Any] | None:
        return next((r for r in self.rows if r["eval_acc"] >= target), None)


def has_batch_dependent_layers(model: nn.Module) -> bool:
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


def evaluate(model, workload, x, y, ranks: Ranks, device, chunk: int = 4096) -> tuple[float, float]:
    """Loss and accuracy on the full eval set, each rank taking every world-th sample."""
    model.eval()
    idx = torch.arange(ranks.rank, x.shape[0], ranks.world_size, device=device)
    loss_sum = correct = count = 0.0
    with torch.no_grad():
        for part in idx.split(chunk):
            out = model(x[part])
            ok, n = workload.correct(out, y[part])
            loss_sum += float(workload.loss(out, y[part])) * n
            correct += float(ok)
            count += n
    model.train()
    loss_sum, correct, count = dd.all_reduce_sum([loss_sum, correct, count], device)
    return loss_sum / count, correct / count


def simulated_step(model, workload, x, y, shards: list[torch.Tensor], fused: bool) -> torch.Tensor:
    """One step's gradients for N virtual workers: the mean of their micro-batch gradients."""
    if fused:  # no batch-dependent layers: one pass over the union is the same computation
        idx = torch.cat(shards)
        loss = workload.loss(model(x[idx]), y[idx])
        loss.backward()
        return loss.detach()
    total, rank0_buffers = 0.0, None
    for r, idx in enumerate(shards):
        loss = workload.loss(model(x[idx]), y[idx])
        (loss / len(shards)).backward()
        total = total + loss.detach()
        if r == 0:
            rank0_buffers = [b.detach().clone() for b in model.buffers()]
    # DDP broadcasts rank 0's buffers (BatchNorm statistics) each step: keep rank 0's.
    for b, saved in zip(model.buffers(), rank0_buffers or [], strict=False):
        b.copy_(saved)
    return total / len(shards)


def ddp_step(net, workload, x, y, idx: torch.Tensor) -> torch.Tensor:
    loss = workload.loss(net(x[idx]), y[idx])
    loss.backward()
    return loss.detach()


def build_optimizer(spec: RunSpec, model: nn.Module) -> torch.optim.Optimizer:
    """Momentum SGD, or LARS for the ``lars`` rule (the LR is set every step by the plan)."""
    if spec.lr_rule == "lars":
        groups = lars_param_groups(model, spec.weight_decay)
        return LARS(
            groups,
            lr=spec.base_lr,
            momentum=spec.momentum,
            trust_coefficient=spec.trust_coefficient,
        )
    return torch.optim.SGD(
        model.parameters(),
        lr=spec.base_lr,
        momentum=spec.momentum,
        weight_decay=spec.weight_decay,
        nesterov=spec.nesterov,
    )


def batches(spec: RunSpec, ranks: Ranks, num_train: int, total_steps: int):
    """Yield (epoch, indices) for every step; indices is a list of shards in simulated mode."""
    step, epoch = 0, 0
    while step < total_steps:
        if spec.mode == "simulated":
            epoch_batches = all_worker_batches(
                num_train, spec.workers, spec.per_worker_batch, spec.seed, epoch
            )
        else:
            epoch_batches = worker_batches(
                num_train, ranks.world_size, ranks.rank, spec.per_worker_batch, spec.seed, epoch
            )
        for idx in epoch_batches:
            if step >= total_steps:
                return
            yield epoch, idx
            step += 1
        epoch += 1


def eval_steps(spe: int, epochs: int, per_epoch: int, total_steps: int) -> set[int]:
    points = {
        round(e * spe + k * spe / per_epoch) for e in range(epochs) for k in range(1, per_epoch + 1)
    }
    return {s for s in points if 0 < s <= total_steps} | {total_steps}


def train(spec: RunSpec, ranks: Ranks, device: torch.device, writer: RunWriter | None) -> str:
    """Run the whole training; returns the final status ('complete' or 'diverged')."""
    torch.set_num_threads(spec.threads_per_worker)
    wall0 = time.perf_counter()

    # ---- data: the same tensors on every rank; each rank indexes its own shard
    workload = spec.build_workload()
    data = workload.load_data()
    dtype = torch.float64 if spec.precision == "fp64" else torch.float32

    def to_device(t: torch.Tensor) -> torch.Tensor:
        return t.to(device, dtype) if t.is_floating_point() else t.to(device)

    train_x, train_y = to_device(data.train_x), to_device(data.train_y)
    eval_x, eval_y = to_device(data.eval_x), to_device(data.eval_y)

    # ---- model: identical on every rank (checked), then wrapped by the sync strategy
    torch.manual_seed(spec.seed)
    model = workload.build_model().to(device=device, dtype=dtype)
    digest = dd.check_identical_replicas(model)
    strategy = sync.build(spec.sync, device, distributed=dd.active())
    net: nn.Module = strategy.wrap(model, spec.bucket_cap_mb)
    hook = strategy.comm_hook()  # DDP takes one hook: wrap it here (timing), then register
    if hook is not None:
        timed(hook, strategy.counter).register(net)
    optimizer = build_optimizer(spec, model)

    # ---- schedule
    spe = steps_per_epoch(data.num_train, spec.global_batch)
    if spe < 1:
        raise ValueError(
            f"global batch {spec.global_batch} is larger than the training set ({data.num_train})"
        )
    total_steps = (
        spe * spec.epochs if spec.max_steps is None else min(spe * spec.epochs, spec.max_steps)
    )
    plan = LRPlan(
        rule=spec.lr_rule,
        base_lr=spec.base_lr,
        base_batch=spec.base_batch,
        global_batch=spec.global_batch,
        steps_per_epoch=spe,
        total_steps=total_steps,
        warmup_epochs=spec.warmup_epochs,
        schedule=spec.schedule,
        milestones=spec.milestones,
        gamma=spec.gamma,
        power=spec.power,
    )
    evals = eval_steps(spe, spec.epochs, spec.evals_per_epoch, total_steps)
    fused = spec.mode == "simulated" and not has_batch_dependent_layers(model)
    if writer:
        writer.update(
            init_digest=digest,
            num_params=sum(p.numel() for p in model.parameters()),
            steps_per_epoch=spe,
            total_steps=total_steps,
            train_samples=data.num_train,
            eval_samples=data.num_eval,
        )

    log = EvalLog()
    tracker = LossTracker(device)
    timer = StepTimer(device, warmup=spec.timing_warmup_steps)
    lrs: list[float] = []
    status, error, step = "complete", None, 0

    def record_eval(train_loss: float) -> bool:
        """Evaluate, log a row; False when the model has diverged."""
        shown = strategy.eval_model(model)
        eval_loss, eval_acc = evaluate(shown, workload, eval_x, eval_y, ranks, device)
        row = {
            "epoch": round(step / spe, 4),
            "step": step,
            "samples_seen": step * spec.global_batch,
            "lr": lrs[-1] if lrs else plan.lr_at(0),
            "train_loss": train_loss,
            "eval_loss": eval_loss,
            "eval_acc": eval_acc,
            "wall_s": time.perf_counter() - wall0,
        }
        log.rows.append(row)
        if writer:
            writer.append_epoch(row)
            writer.update(progress={"step": step, "epoch": row["epoch"]})
            print_progress(spec, row, total_steps / spe)
        return math.isfinite(eval_loss)

    if spec.eval_at_start:
        record_eval(float("nan"))

    # ---- the loop
    net.train()
    for epoch, idx in batches(spec, ranks, data.num_train, total_steps):
        lr = plan.lr_at(step)
        for group in optimizer.param_groups:
            group["lr"] = lr
        timer.start()
        optimizer.zero_grad(set_to_none=True)
        if spec.mode == "simulated":
            loss = simulated_step(model, workload, train_x, train_y, idx, fused)
        else:
            loss = ddp_step(net, workload, train_x, train_y, idx)
            strategy.sync_gradients(model)
        optimizer.step()
        strategy.after_step(model)
        timer.stop(step)
        strategy.counter.end_step()
        lrs.append(lr)
        tracker.add(loss)
        step += 1

        checkpoint = step % spec.check_every == 0 or step in evals
        if checkpoint and not math.isfinite(tracker.sync()):
            status, error = "diverged", f"non-finite training loss by step {step} (epoch {epoch})"
            break
        if step in evals and not record_eval(tracker.take_window()):
            status, error = "diverged", f"non-finite eval loss at step {step} (epoch {epoch})"
            break

    # ---- measurements: per-step max across ranks, throughput from the slowest rank's wall time
    metrics = summarize(spec, ranks, timer, log, lrs, tracker, step, device)
    measured, comm_s = sync_metrics(strategy, timer.steps, metrics["_step_max"], device)
    metrics.update({k: v for k, v in measured.items() if metrics.get(k) is None})
    final_model = strategy.eval_model(model)  # every rank: it may communicate
    if writer:
        writer.write_steps(step_rows(spec, timer, metrics.pop("_step_max"), lrs, comm_s))
        if spec.save_params:
            save_params(final_model, writer.dir / "params.npz")
        writer.finish(status, error=error, metrics=metrics, wall_time_s=time.perf_counter() - wall0)
    else:
        metrics.pop("_step_max")
    return status  # DDP's reducer dies with this frame, before the group is destroyed


def summarize(spec, ranks, timer, log, lrs, tracker, step, device) -> dict[str, Any]:
    local = torch.tensor(timer.durations, dtype=torch.float64, device=device)
    step_max = dd.gather_max(local).cpu()
    per_rank_total = dd.gather_max(
        torch.tensor([sum(timer.durations)], dtype=torch.float64, device=device)
    )
    timed_wall = float(per_rank_total[0])
    durations = step_max.tolist()
    samples_per_s = len(durations) * spec.global_batch / timed_wall if timed_wall > 0 else None
    last = log.last
    hit = log.first_reaching(spec.target_acc)
    accs = [r["eval_acc"] for r in log.rows if math.isfinite(r["eval_acc"])]
    train_losses = [r["train_loss"] for r in log.rows if math.isfinite(r["train_loss"])]
    return {
        "samples_per_s": samples_per_s,
        "samples_per_s_per_worker": samples_per_s / spec.workers if samples_per_s else None,
        "step_time_s": median(durations),
        "step_time_p90_s": percentile(durations, 90),
        "step_time_min_s": min(durations) if durations else None,
        "compute_time_s": None,
        "comm_time_s": None,
        "exposed_comm_s": None,
        "comm_fraction": None,
        "steps": step,
        "timed_steps": len(durations),
        "final_train_loss": train_losses[-1] if train_losses else None,
        "final_eval_loss": last.get("eval_loss"),
        "final_eval_acc": last.get("eval_acc"),
        "best_eval_acc": max(accs) if accs else None,
        "steps_to_target": hit["step"] if hit else None,
        "epochs_to_target": hit["epoch"] if hit else None,
        "grad_noise_scale": None,
        "_step_max": durations,
    }


def step_rows(
    spec: RunSpec,
    timer: StepTimer,
    step_max: list[float],
    lrs: list[float],
    comm_s: list[float] | None,
):
    for i in sample_indices(len(step_max), spec.max_recorded_steps):
        step = timer.steps[i]
        yield {
            "step": step,
            "step_time_s": step_max[i],
            "compute_s": "",
            "comm_s": comm_s[i] if comm_s is not None else "",
            "lr": lrs[step],
        }


def save_params(model: nn.Module, path) -> None:
    """Final parameters as a plain .npz (no pickle), for equivalence checks."""
    arrays = {k: v.detach().cpu().numpy() for k, v in model.state_dict().items()}
    np.savez(path, **arrays)


def print_progress(spec: RunSpec, row: dict[str, Any], epochs: float) -> None:
    print(
        f"[{spec.run_id}] epoch {row['epoch']:.2f}/{epochs:g}  step {row['step']}"
        f"  lr {row['lr']:.4g}  train_loss {row['train_loss']:.4f}"
        f"  eval_loss {row['eval_loss']:.4f}  eval_acc {100 * row['eval_acc']:.2f}%"
        f"  ({row['wall_s']:.1f}s)",
        flush=True,
    )
