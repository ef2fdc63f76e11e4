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

from suite import progress, sync
from suite.conf.run_spec import RunSpec
from suite.engine import data_memo
from suite.engine import distributed as dd
from suite.engine.distributed import Ranks
from suite.engine.lars import LARS, lars_param_groups
from suite.engine.lr_rules import LRPlan
from suite.engine.precision import Precision
from suite.engine.sharding import all_worker_batches, steps_per_epoch, worker_batches
from suite.measure.calibration import time_without_sync
from suite.measure.comm_timer import CommStep, CommTimer
from suite.measure.flops import training_flops_per_sample, utilization
from suite.measure.noise_scale import NoiseScaleMeter, choose_method, piece_batches, squared_norm
from suite.measure.step_timer import StepTimer, median, percentile, sample_indices, windowed
from suite.results import RunWriter
from suite.sync.counter import CommCounter
from suite.sync.measure import sync_metrics


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
    model,
    workload,
    x,
    y,
    shards: list[torch.Tensor],
    fused: bool,
    amp: Precision,
    norms: list | None = None,
) -> torch.Tensor:
    """One step's gradients for N virtual workers: the mean of their micro-batch gradients.

    With ``norms`` (and micro-batches run one by one) each micro-batch's squared gradient norm
    is appended, for the noise scale; the gradients are the same either way.
    """
    if fused:  # no batch-dependent layers: one pass over the union is the same computation
        idx = shards[0] if len(shards) == 1 else torch.cat(shards)
        loss = forward_loss(model, workload, x, y, idx, amp)
        amp.backward(loss)
        return loss.detach()
    n = len(shards)
    total, rank0_buffers, before = 0.0, None, None
    for r, idx in enumerate(shards):
        loss = forward_loss(model, workload, x, y, idx, amp)
        amp.backward(loss / n)
        total = total + loss.detach()
        if r == 0:
            rank0_buffers = [b.detach().clone() for b in model.buffers()]
        if norms is not None:  # this micro-batch's gradient is what the sum grew by
            grads = gradients(model)
            grown = grads if before is None else [g - b for g, b in zip(grads, before, strict=True)]
            norms.append(squared_norm(grown) * n**2)
            if r + 1 < n:
                before = [g.detach().clone() for g in grads]
    # DDP broadcasts rank 0's buffers (BatchNorm statistics) each step: keep rank 0's.
    for b, saved in zip(model.buffers(), rank0_buffers or [], strict=False):
        b.copy_(saved)
    return total / n


def half_batch_norms(
    model, workload, x, y, batch: torch.Tensor | list[torch.Tensor], amp: Precision
) -> list[torch.Tensor]:
    """Squared gradient norms of the two halves of a batch whose gradient is in ``.grad``.

    One extra forward and backward pass over the first half, kept out of ``.grad`` (and of the
    random number stream): the second half's gradient follows from the whole's, so the
    training is exactly what it would have been without the measurement.
    """
    idx = torch.cat(batch) if isinstance(batch, list) else batch
    first, second = idx.tensor_split(2)
    params = [p for p in model.parameters() if p.grad is not None]
    devices = [x.device] if x.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        loss = forward_loss(model, workload, x, y, first, amp)
        scaled = amp.scaler.scale(loss) if amp.scaler else loss
        g_first = torch.autograd.grad(scaled, params)
    n, n1, n2 = len(idx), len(first), len(second)
    g_second = [(n * p.grad - n1 * g) / n2 for p, g in zip(params, g_first, strict=True)]
    return [squared_norm(list(g_first)), squared_norm(g_second)]


def ddp_step(net, workload, x, y, idx: torch.Tensor, amp: Precision) -> torch.Tensor:
    loss = forward_loss(net, workload, x, y, idx, amp)
    amp.backward(loss)
    return loss.detach()


def gradients(model: nn.Module) -> list[torch.Tensor]:
    return [p.grad for p in model.parameters() if p.grad is not None]


def noise_scale_meter(
    spec: RunSpec, ranks: Ranks, device, model: nn.Module, hooked: bool
) -> NoiseScaleMeter:
    """The gradient-noise-scale meter of this run (method None: not measured)."""
    method = choose_method(
        spec.noise_scale,
        spec.mode,
        spec.workers,
        spec.global_batch,
        spec.sync.name,
        distributed=dd.active(),
        batch_dependent=has_batch_dependent_layers(model),
    )
    if method == "ranks" and not hooked:  # local norms are read in the comm hook
        method = None
    b_small, b_big = piece_batches(method or "ranks", spec.per_worker_batch, spec.global_batch)
    return NoiseScaleMeter(
        method,
        spec.noise_scale.every,
        spec.noise_scale.ema,
        b_small,
        b_big,
        device,
        ranks.world_size,
    )


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

    # ---- model: identical on every rank (checked), then wrapped by the sync strategy
    torch.manual_seed(spec.seed)
    model = workload.build_model().to(device=device, dtype=dtype)
    digest = dd.check_identical_replicas(model)
    # Counted before DDP wraps the model, and only where results are written.
    flops = (
        training_flops_per_sample(
            model,
            lambda m, idx: forward_loss(m, workload, train_x, train_y, idx, amp),
            torch.arange(min(2, data.num_train), device=device),
        )
        if writer
        else None
    )
    strategy = sync.build(spec.sync, device, distributed=dd.active())
    net: nn.Module = strategy.wrap(model, spec.bucket_cap_mb)
    comm: CommTimer | None = None  # None: no process group, so nothing to communicate
    if dd.active():
        comm = CommTimer(device)
        hook = strategy.comm_hook()  # DDP takes one hook: the strategy's, timed
        if not spec.comm_hook:  # DDP's built-in all-reduce: nothing to time from inside
            comm.hooked = False
        elif hook is not None:  # (a strategy without one times its exchange where it waits)
            comm.attach(net, hook.fn, hook.state, issued=lambda: strategy.counter.pending_ops)
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
    meter = noise_scale_meter(spec, ranks, device, model, hooked=comm is not None and comm.hooked)
    if comm is not None and meter.method == "ranks":
        comm.observe = meter.observe_bucket

    def run_step(idx, synchronize: bool = True, measure: bool = False) -> torch.Tensor:
        """One training step: the unit that is timed, with and without gradient sync."""
        optimizer.zero_grad(set_to_none=True)
        if spec.mode == "simulated":
            norms = [] if measure and meter.method == "micro_batches" else None
            loss = simulated_step(model, workload, train_x, train_y, idx, fused, amp, norms)
            if norms:
                meter.add_pieces(norms, gradients(model), amp.loss_scale())
        else:
            if measure and meter.method == "ranks":
                meter.begin_ddp_step()
            loss = ddp_step(net, workload, train_x, train_y, idx, amp)
            if synchronize:
                strategy.sync_gradients(model)
            if measure and meter.method == "ranks":
                meter.end_ddp_step(gradients(model), amp.loss_scale())
        if measure and meter.method == "halves":
            norms = half_batch_norms(model, workload, train_x, train_y, idx, amp)
            meter.add_pieces(norms, gradients(model), amp.loss_scale())
        amp.step(optimizer)
        if synchronize:
            strategy.after_step(model)
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
        shown = strategy.eval_model(model)  # local SGD between averages: the replicas' mean
        eval_loss, eval_acc = evaluate(shown, workload, eval_x, eval_y, ranks, device, amp)
        row = {
            "epoch": round(step / spe, 4),
            "step": step,
            "samples_seen": step * spec.global_batch,
            "lr": lrs[-1] if lrs else plan.lr_at(0),
            "train_loss": train_loss,
            "eval_loss": eval_loss,
            "eval_acc": eval_acc,
            "wall_s": time.perf_counter() - wall0,
            **meter.row(),
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
            lambda idx: run_step(idx, synchronize=False),
            batches(spec, ranks, data.num_train, warm + spec.calibration_steps),
            warm,
            spec.calibration_steps,
            device,
        )
        if comm.calls != calls or strategy.counter.pending_ops:
            raise RuntimeError("gradients were synchronized during the no_sync calibration")

    # ---- the loop
    comm_steps: list[CommStep] = []
    for epoch, idx in batches(spec, ranks, data.num_train, total_steps):
        lr = plan.lr_at(step)
        for group in optimizer.param_groups:
            group["lr"] = lr
        timer.start()
        if comm is not None:
            comm.begin_step()
        loss = run_step(idx, measure=meter.measures(step))
        timer.stop(step)
        strategy.counter.end_step()
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
            meter.sync()
            reporter.run_step(step, window_loss)
            if not math.isfinite(window_loss):
                status, error = (
                    "diverged",
                    f"non-finite training loss by step {step} (epoch {epoch})",
                )
                break
        if step in evals:
            if not record_eval(tracker.take_window()):
                status, error = "diverged", f"non-finite eval loss at step {step} (epoch {epoch})"
                break
            # Rank 0 has just written results; without this the other ranks would wait for it
            # inside the next timed step's all-reduce, and the writing would count as training.
            dd.barrier()

    # ---- measurements: per-step max across ranks, throughput from the slowest rank's wall time
    timing, per_step = timing_metrics(
        spec, timer, comm_steps, no_sync_times, comm, device, strategy.counter, strategy.period
    )
    metrics = {
        **timing,
        **training_metrics(spec, log, step),
        **sync_metrics(strategy, device),
        "grad_noise_scale": meter.summary(),
    }
    devices = 1 if spec.mode == "simulated" else spec.workers  # simulated: one device does all
    metrics.update(utilization(flops, metrics["samples_per_s"], devices, spec.peak_tflops))
    final_model = strategy.eval_model(model)  # on every rank: it may communicate
    if writer:
        writer.write_steps(step_rows(spec, timer, per_step, lrs))
        if spec.save_params:
            save_params(final_model, writer.dir / "params.npz")
        writer.finish(status, error=error, metrics=metrics, wall_time_s=time.perf_counter() - wall0)
    return status  # DDP's reducer dies with this frame, before the group is destroyed


def timing_metrics(
    spec: RunSpec,
    timer: StepTimer,
    comm_steps: list[CommStep],
    no_sync_times: list[float],
    comm: CommTimer | None,
    device: torch.device,
    counter: CommCounter,
    period: int = 1,
) -> tuple[dict[str, Any], list[list[float]]]:
    """Step-time metrics, and per timed step [step_s, comm_s, compute_s], each max across ranks.

    Throughput is global samples over the slowest rank's summed step time, never rank 0 x N.
    Per step, comm_s is the time communication was in flight (the hook's all-reduces, plus any
    exchange the strategy waits for outside the backward pass) and compute_s the step time
    without the communication it waited for. Medians are taken over windows of ``period`` steps
    (per step), so that an exchange made every ``period`` steps counts at its real weight.
    """
    durations = timer.durations
    if comm is not None:
        waited = [counter.steps[i].blocking_s for i in timer.steps]  # outside the hooks
        comm_s = [c.busy_s + w for c, w in zip(comm_steps, waited, strict=True)]
        tail_s = [c.tail_s + w for c, w in zip(comm_steps, waited, strict=True)]
        compute_s = [d - t for d, t in zip(durations, tail_s, strict=True)]
    else:  # one process: nothing is communicated
        comm_s, compute_s, tail_s = [0.0] * len(durations), list(durations), [0.0] * len(durations)
    per_step = _max_across_ranks([durations, comm_s, compute_s, tail_s], device)
    step_max, comm_max, _, tail_max = per_step
    slowest_total = _max_across_ranks([[sum(durations)]], device)[0][0]
    samples_per_s = (
        len(durations) * spec.global_batch / slowest_total if slowest_total > 0 else None
    )
    step_time = median(windowed(step_max, period))
    if comm is None:
        no_sync_time = step_time
    else:
        no_sync_time = median(windowed(_max_across_ranks([no_sync_times], device)[0], period))
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
        "comm_time_s": median(windowed(comm_max, period)),
        "comm_time_p90_s": percentile(comm_max, 90),
        "comm_tail_s": median(windowed(tail_max, period)),
        "exposed_comm_s": exposed,
        "comm_fraction": exposed / step_time if exposed is not None and step_time else None,
        "step_time_no_sync_s": no_sync_time if comm is not None else None,
        "calibration_steps": len(no_sync_times),
        "comm_buckets": max((c.buckets for c in comm_steps), default=0),
        "timed_steps": len(durations),
    }
    rows = [list(row) for row in zip(step_max, comm_max, per_step[2], strict=True)]
    if comm is not None and not comm.hooked:  # DDP's own all-reduce: not seen step by step
        metrics.update(comm_time_s=None, comm_time_p90_s=None, comm_tail_s=None, comm_buckets=None)
        rows = [[step_s, math.nan, math.nan] for step_s, _, _ in rows]
    return metrics, rows


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
