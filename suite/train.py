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
from torch.nn.parallel import DistributedDataParallel as DDP

from suite import data_memo, progress
from suite import distributed as dd
from suite.calibration import time_without_sync
from suite.comm_timer import CommStep, CommTimer
from suite.distributed import Ranks
from suite.lars import LARS, lars_param_groups
from suite.lr_rules import LRPlan
from suite.precision import Precision
from suite.results import RunWriter
from suite.run_spec import RunSpec
from suite.sharding import all_worker_batches, steps_per_epoch, worker_batches
from suite.timing import StepTimer, median, percentile, sample_indices


class LossTracker:
    """Sums training losses locally and only talks to other ranks every ``check_every`` steps."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.pending: list[torch.Tensor] = []  # this rank's losses since the last sync
        self.window_sum, self.window_n = 0.0, 0.0

    def add(self, loss: torch.Tensor) -> None:
        # One cheap append per step (no arithmetic, no device sync); summed at the next sync.
        self.pending.append(loss.detach())

    def sync(self) -> float:
        """All-reduce what is pending; returns its mean (NaN/Inf when the run diverged)."""
        local = torch.stack(self.pending).double().sum().item() if self.pending else 0.0
        total, count = dd.all_reduce_sum([local, float(len(self.pending))], self.device)
        self.pending.clear()
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


def evaluate(
    model, workload, x, y, ranks: Ranks, device, amp: Precision, chunk: int = 1024
) -> tuple[float, float]:
    """Loss and accuracy on the full eval set, each rank taking every world-th sample."""
    model.eval()
    idx = torch.arange(ranks.rank, x.shape[0], ranks.world_size, device=device)
    loss_sum = correct = count = 0.0
    with torch.no_grad():
        for part in idx.split(chunk):
            with amp.autocast():
                out = model(x[part])
                loss = workload.loss(out, y[part])
            ok, n = workload.correct(out, y[part])
            loss_sum += float(loss) * n
            correct += float(ok)
            count += n
    model.train()
    loss_sum, correct, count = dd.all_reduce_sum([loss_sum, correct, count], device)
    return loss_sum / count, correct / count


def forward_loss(net, workload, x, y, idx, amp: Precision) -> torch.Tensor:
    with amp.autocast():
        return workload.loss(net(x[idx]), y[idx])


def simulated_step(
    model, workload, x, y, shards: list[torch.Tensor], fused: bool, amp: Precision
) -> torch.Tensor:
    """One step's gradients for N virtual workers: the mean of their micro-batch gradients."""
    if fused:  # no batch-dependent layers: one pass over the union is the same computation
        idx = shards[0] if len(shards) == 1 else torch.cat(shards)
        loss = forward_loss(model, workload, x, y, idx, amp)
        amp.backward(loss)
        return loss.detach()
    total, rank0_buffers = 0.0, None
    for r, idx in enumerate(shards):
        loss = forward_loss(model, workload, x, y, idx, amp)
        amp.backward(loss / len(shards))
        total = total + loss.detach()
        if r == 0:
            rank0_buffers = [b.detach().clone() for b in model.buffers()]
    # DDP broadcasts rank 0's buffers (BatchNorm statistics) each step: keep rank 0's.
    for b, saved in zip(model.buffers(), rank0_buffers or [], strict=False):
        b.copy_(saved)
    return total / len(shards)


def ddp_step(net, workload, x, y, idx: torch.Tensor, amp: Precision) -> torch.Tensor:
    loss = forward_loss(net, workload, x, y, idx, amp)
    amp.backward(loss)
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
    data = data_memo.load_data(workload)  # generated or read once per process, not per run
    amp = Precision.create(spec.precision, device)
    dtype = amp.param_dtype

    def to_device(t: torch.Tensor) -> torch.Tensor:
        return t.to(device, dtype) if t.is_floating_point() else t.to(device)

    train_x, train_y = to_device(data.train_x), to_device(data.train_y)
    eval_x, eval_y = to_device(data.eval_x), to_device(data.eval_y)

    # ---- model: identical on every rank (checked), then wrapped for gradient averaging
    torch.manual_seed(spec.seed)
    model = workload.build_model().to(device=device, dtype=dtype)
    digest = dd.check_identical_replicas(model)
    net: nn.Module = model
    comm: CommTimer | None = None  # None: no process group, so nothing to communicate
    if dd.active():
        net = DDP(
            model,
            device_ids=[device.index] if device.type == "cuda" else None,
            bucket_cap_mb=spec.bucket_cap_mb,
        )
        comm = CommTimer(device)
        comm.attach(net)
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

    def run_step(idx) -> torch.Tensor:
        """One training step: the unit that is timed, with and without gradient sync."""
        optimizer.zero_grad(set_to_none=True)
        if spec.mode == "simulated":
            loss = simulated_step(model, workload, train_x, train_y, idx, fused, amp)
        else:
            loss = ddp_step(net, workload, train_x, train_y, idx, amp)
        amp.step(optimizer)
        return loss

    if writer:
        writer.update(
            init_digest=digest,
            num_params=sum(p.numel() for p in model.parameters()),
            steps_per_epoch=spe,
            total_steps=total_steps,
            train_samples=data.num_train,
            eval_samples=data.num_eval,
        )

    reporter = progress.current() if writer else progress.Reporter()
    reporter.run_started(spec.run_id, total_steps, spe)
    log = EvalLog()
    tracker = LossTracker(device)
    timer = StepTimer(device, warmup=spec.timing_warmup_steps)
    lrs: list[float] = []
    status, error, step = "complete", None, 0

    def record_eval(train_loss: float) -> bool:
        """Evaluate, log a row; False when the model has diverged."""
        eval_loss, eval_acc = evaluate(model, workload, eval_x, eval_y, ranks, device, amp)
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
            reporter.run_evaluated(row)
        return math.isfinite(eval_loss)

    if spec.eval_at_start:
        record_eval(float("nan"))

    # ---- calibration: the same steps without gradient sync, state restored afterwards
    net.train()
    no_sync_times: list[float] = []
    if comm is not None and spec.calibration_steps > 0:
        calls = comm.calls
        warm = spec.timing_warmup_steps
        no_sync_times = time_without_sync(
            net,
            optimizer,
            amp,
            run_step,
            batches(spec, ranks, data.num_train, warm + spec.calibration_steps),
            warm,
            spec.calibration_steps,
            device,
        )
        if comm.calls != calls:
            raise RuntimeError("gradients were all-reduced during the no_sync calibration")

    # ---- the loop
    comm_steps: list[CommStep] = []
    for epoch, idx in batches(spec, ranks, data.num_train, total_steps):
        lr = plan.lr_at(step)
        for group in optimizer.param_groups:
            group["lr"] = lr
        timer.start()
        if comm is not None:
            comm.begin_step()
        loss = run_step(idx)
        timer.stop(step)
        if comm is not None:
            comm_step = comm.end_step()
            if timer.last_kept:
                comm_steps.append(comm_step)
        lrs.append(lr)
        tracker.add(loss)
        step += 1

        checkpoint = step % spec.check_every == 0 or step in evals
        if checkpoint:
            window_loss = tracker.sync()
            reporter.run_step(step, window_loss)
            if not math.isfinite(window_loss):
                status, error = (
                    "diverged",
                    f"non-finite training loss by step {step} (epoch {epoch})",
                )
                break
        if step in evals and not record_eval(tracker.take_window()):
            status, error = "diverged", f"non-finite eval loss at step {step} (epoch {epoch})"
            break

    # ---- measurements: per-step max across ranks, throughput from the slowest rank's wall time
    timing, per_step = timing_metrics(spec, timer, comm_steps, no_sync_times, comm, device)
    metrics = {**timing, **training_metrics(spec, log, step)}
    if writer:
        writer.write_steps(step_rows(spec, timer, per_step, lrs))
        if spec.save_params:
            save_params(model, writer.dir / "params.npz")
        writer.finish(status, error=error, metrics=metrics, wall_time_s=time.perf_counter() - wall0)
    return status  # DDP's reducer dies with this frame, before the group is destroyed


def timing_metrics(
    spec: RunSpec,
    timer: StepTimer,
    comm_steps: list[CommStep],
    no_sync_times: list[float],
    comm: CommTimer | None,
    device: torch.device,
) -> tuple[dict[str, Any], list[list[float]]]:
    """Step-time metrics, and per timed step [step_s, comm_s, compute_s], each max across ranks.

    Throughput is global samples over the slowest rank's summed step time, never rank 0 x N.
    Per step, comm_s is the time the gradient all-reduce was in flight and compute_s the step
    time without the communication still in flight after the last gradient was ready.
    """
    durations = timer.durations
    if comm is not None:
        comm_s = [c.busy_s for c in comm_steps]
        compute_s = [d - c.tail_s for d, c in zip(durations, comm_steps, strict=True)]
        tail_s = [c.tail_s for c in comm_steps]
    else:  # one process: nothing is communicated
        comm_s, compute_s, tail_s = [0.0] * len(durations), list(durations), [0.0] * len(durations)
    per_step = _max_across_ranks([durations, comm_s, compute_s, tail_s], device)
    step_max, comm_max, _, tail_max = per_step
    slowest_total = _max_across_ranks([[sum(durations)]], device)[0][0]
    samples_per_s = (
        len(durations) * spec.global_batch / slowest_total if slowest_total > 0 else None
    )
    step_time = median(step_max)
    if comm is None:
        no_sync_time = step_time
    else:
        no_sync_time = median(_max_across_ranks([no_sync_times], device)[0])
    exposed = None
    if step_time is not None and no_sync_time is not None:
        # Noise can make the difference slightly negative; no sync cannot cost time.
        exposed = max(0.0, step_time - no_sync_time)
    metrics = {
        "samples_per_s": samples_per_s,
        "samples_per_s_per_worker": samples_per_s / spec.workers if samples_per_s else None,
        "step_time_s": step_time,
        "step_time_p90_s": percentile(step_max, 90),
        "step_time_min_s": min(step_max) if step_max else None,
        "compute_time_s": no_sync_time,
        "comm_time_s": median(comm_max),
        "comm_time_p90_s": percentile(comm_max, 90),
        "comm_tail_s": median(tail_max),
        "exposed_comm_s": exposed,
        "comm_fraction": exposed / step_time if exposed is not None and step_time else None,
        "step_time_no_sync_s": no_sync_time if comm is not None else None,
        "calibration_steps": len(no_sync_times),
        "comm_buckets": max((c.buckets for c in comm_steps), default=0),
        "timed_steps": len(durations),
    }
    return metrics, [list(row) for row in zip(step_max, comm_max, per_step[2], strict=True)]


def _max_across_ranks(columns: list[list[float]], device: torch.device) -> list[list[float]]:
    """Element-wise max across ranks of same-shaped lists of floats (float64)."""
    if not columns[0]:
        return [[] for _ in columns]
    local = torch.tensor(columns, dtype=torch.float64, device=device)
    return dd.gather_max(local).cpu().tolist()


def training_metrics(spec: RunSpec, log: EvalLog, step: int) -> dict[str, Any]:
    last = log.last
    hit = log.first_reaching(spec.target_acc)
    accs = [r["eval_acc"] for r in log.rows if math.isfinite(r["eval_acc"])]
    train_losses = [r["train_loss"] for r in log.rows if math.isfinite(r["train_loss"])]
    return {
        "steps": step,
        "final_train_loss": train_losses[-1] if train_losses else None,
        "final_eval_loss": last.get("eval_loss"),
        "final_eval_acc": last.get("eval_acc"),
        "best_eval_acc": max(accs) if accs else None,
        "steps_to_target": hit["step"] if hit else None,
        "epochs_to_target": hit["epoch"] if hit else None,
        "grad_noise_scale": None,
    }


def step_rows(spec: RunSpec, timer: StepTimer, per_step: list[list[float]], lrs: list[float]):
    for i in sample_indices(len(per_step), spec.max_recorded_steps):
        step = timer.steps[i]
        step_s, comm_s, compute_s = per_step[i]
        yield {
            "step": step,
            "step_time_s": step_s,
            "compute_s": compute_s,
            "comm_s": comm_s,
            "lr": lrs[step],
        }


def save_params(model: nn.Module, path) -> None:
    """Final parameters as a plain .npz (no pickle), for equivalence checks."""
    arrays = {k: v.detach().cpu().numpy() for k, v in model.state_dict().items()}
    np.savez(path, **arrays)
