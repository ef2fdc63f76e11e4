"""The training loop of one run on one rank (or on all virtual workers in simulated mode).

Reads top to bottom: ``setup`` builds what a run works with (its batches, model, replicas,
optimizer, LR plan, probes); ``calibrate`` times the same steps without communication; then
``train_step`` (which waits for its batch, then steps), a divergence ``check`` and
``evaluate_and_record`` until the steps are done or the loss stops being finite; ``finish``
writes the metrics. What is measured lives in the probes
(`dpsuite.measure.probes`); how the replicas average their gradients lives in the replicas
(`dpsuite.engine.replicas`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from dpsuite import progress, sync
from dpsuite.conf.run_spec import RunSpec
from dpsuite.engine import data_memo, workload_calls
from dpsuite.engine.batch_sources import BatchSource, DataProblem, batch_source, steps_per_epoch
from dpsuite.engine.replicas import (
    RankReplicas,
    Replicas,
    SimulatedReplicas,
    gradients,
    loss_under_autocast,
)
from dpsuite.measure.calibration import ExposedCommProbe, time_without_sync
from dpsuite.measure.comm_probe import CommProbe
from dpsuite.measure.comm_timer import CommTimer
from dpsuite.measure.data_wait import DataWaitProbe
from dpsuite.measure.flops import known_peak_tflops, training_flops_per_sample, utilization
from dpsuite.measure.memory import MemoryProbe
from dpsuite.measure.memory_parts import MemoryPartsProbe
from dpsuite.measure.noise_scale import NoiseScaleMeter, NoiseScaleProbe, norms, piece_batches
from dpsuite.measure.probes import Probe, Probes
from dpsuite.measure.profiler import NOT_PROFILED, ProfilerProbe
from dpsuite.measure.rank_timeline import RankTimelineProbe
from dpsuite.measure.step_timer import StepTimeProbe, sample_indices
from dpsuite.optim.lars import LARS, lars_param_groups
from dpsuite.optim.lr_rules import RULES, LRPlan
from dpsuite.optim.precision import Precision
from dpsuite.results import RunWriter
from dpsuite.runtime import distributed
from dpsuite.runtime.ranks import Ranks
from dpsuite.sync.traffic import sync_metrics
from dpsuite.workloads import Data, Workload
from dpsuite.workloads.base import parameter_count

# How the loop decides divergence (run.json ``step_protocol``; runs before it have none: 1,
# the ranks' mean loss all-reduced at every check). 2: from the parameters every rank shares,
# with no collective, where the strategy keeps them identical. A run stops at the same check
# but where a step's update overflows while its loss was finite (2 stops one check sooner) or
# fp16's loss scaler skips an overflowing step (2 goes on, as the parameters are untouched).
STEP_PROTOCOL = 2


def train(
    spec: RunSpec,
    ranks: Ranks,
    device: torch.device,
    writer: RunWriter | None,
    run_dir: Path | None = None,
) -> str:
    """Run the whole training; returns the final status ('complete' or 'diverged').
    ``run_dir``: the run's directory as every rank sees it (profiler traces go there)."""
    run = setup(spec, ranks, device, writer, run_dir)
    calibrate(run)
    if spec.cfg.train.eval_at_start:
        evaluate_and_record(run, step=0, train_loss=math.nan)

    status, error, step = "complete", None, 0
    batches = run.replicas.batches()
    while step < run.total_steps:
        epoch, finite = loop_step(run, step, batches)
        step += 1
        if not finite:
            status, error = "diverged", f"non-finite training loss by step {step} (epoch {epoch})"
            break
        if step in run.evals:
            if not evaluate_and_record(run, step, run.losses.take_window()):
                status, error = "diverged", f"non-finite eval loss at step {step} (epoch {epoch})"
                break
            reached = target_hit(
                run.log, run.target, spec.cfg.train.target_evals, run.workload.target_metric
            )
            if spec.cfg.train.stop_at_target and reached is not None:
                break  # the target is what was asked: the rest of the budget is not needed

    finish(run, step, status, error)
    return status  # DDP's reducer dies with this frame, before the group is destroyed


def loop_step(run: Run, step: int, batches: Iterator[tuple[int, Any]]) -> tuple[int, bool]:
    """Step ``step`` as the loop takes it: ``train_step``, then the divergence ``check`` when
    one is due after it. Returns the step's epoch, and False when that check found the run
    non-finite."""
    epoch = train_step(run, step, batches)
    done = step + 1
    if done % run.spec.cfg.train.check_every == 0 or done in run.evals:
        return epoch, check(run, done)
    return epoch, True


def train_step(run: Run, step: int, batches: Iterator[tuple[int, Any]]) -> int:
    """One optimizer step of every replica, from the wait for its batch on: the unit the
    probes time and measure. Returns the epoch the batch belongs to."""
    lr = run.plan.lr_at(step)
    for group in run.optimizer.param_groups:
        group["lr"] = lr
    run.probes.on_step_start(step)
    epoch, batch = next(batches)  # blocked here while the input pipeline is behind
    run.probes.on_batch_ready(step)
    run.optimizer.zero_grad(set_to_none=True)
    loss = run.replicas.forward_backward(batch)  # the workers' averaged gradient is in .grad
    run.probes.on_backward_end(step)
    run.precision.step(run.optimizer)
    run.replicas.after_step()  # parameter exchanges (local SGD's model averaging)
    run.probes.on_step_end(step)
    run.losses.add(loss)
    return epoch


def check(run: Run, step: int) -> bool:
    """Whether the run is still finite, decided alike on every rank (``divergence_flag``)."""
    shown = run.reporter.wants_step_loss()
    finite, loss = divergence_flag(run, shown)
    run.probes.on_check()
    if shown:
        run.reporter.run_step(step, loss)
    return finite


def divergence_flag(run: Run, shown: bool = True) -> tuple[bool, float]:
    """(finite, the training loss to show) at a check. Where every rank holds the same
    parameters after each step, a non-finite loss on any rank has made them non-finite on all
    (through the averaged gradient): their norms are read, with no collective, and the loss
    shown is this rank's, read with them (one read) only where it is ``shown`` (else NaN).
    Otherwise (and in one process) the losses decide, summed across ranks when there are
    several (the ranks meet)."""
    chunk, count = run.losses.close_chunk()
    if not distributed.active():
        value = LossTracker.total(chunk).item()  # one process: its loss is everyone's
        return math.isfinite(value), value / count if count else 0.0
    if run.strategy.same_parameters:
        params = run.shared_params
        sizes = parameter_sizes(params)
        if shown:  # one host read
            read = torch.cat([sizes.double(), LossTracker.total(chunk).reshape(1)]).tolist()
            shared, value = read[:-1], read[-1]
        else:
            shared, value = sizes.tolist(), math.nan
        finite = all(map(math.isfinite, shared))
        if not finite:  # a non-finite parameter, or a norm that overflowed its dtype
            finite = math.isfinite(exact_parameter_sum(params).item())
        return finite, value / count if count else 0.0
    total, n = distributed.all_reduce_sum([LossTracker.total(chunk).item(), count], run.device)
    mean = total / n if n else 0.0
    return math.isfinite(mean), mean


def parameter_sizes(params: list[Tensor]) -> Tensor:
    """Numbers from all the parameters, all finite only if every parameter is: their 2-norms,
    in one fused kernel (half precision's in float32), read as they are (a sum of them would
    be one kernel more at every check). Where one is not finite, ``exact_parameter_sum``
    decides (a norm can overflow where the parameters are finite); summing each parameter in
    float64 costs a kernel per parameter, which only parameters of mixed dtypes pay here."""
    if len({p.dtype for p in params}) > 1:
        return exact_parameter_sum(params).reshape(1)
    return torch.stack(norms(params))


def exact_parameter_sum(params: list[Tensor]) -> Tensor:
    """The parameters' sum in float64: not finite only where a parameter is not."""
    return torch.stack([p.detach().sum(dtype=torch.float64) for p in params]).sum()


def evaluate_and_record(run: Run, step: int, train_loss: float) -> bool:
    """Evaluate on the full eval set and log a row; False when the model has diverged."""
    eval_loss, eval_acc = evaluate(run, run.replicas.eval_model(), "eval")
    row = {
        "epoch": round(step / run.steps_per_epoch, 4),
        "step": step,
        "samples_seen": step * run.spec.global_batch,
        "lr": run.plan.lr_at(max(step - 1, 0)),  # the LR of the last step taken
        "train_loss": train_loss,
        "eval_loss": eval_loss,
        "eval_acc": eval_acc,
        "wall_s": time.perf_counter() - run.wall0,
    }
    run.probes.on_eval(row)
    run.log.append(row)
    if run.writer:
        run.writer.append_epoch(row)
        run.writer.update(progress={"step": step, "epoch": row["epoch"]})
        # Random inputs have nothing to learn: their accuracy is not shown as if it meant
        # something; nor is the accuracy of a workload that has none (a regression).
        no_acc = run.workload.synthetic_data or not math.isfinite(eval_acc)
        run.reporter.run_evaluated({k: v for k, v in row.items() if k != "eval_acc" or not no_acc})
    # Rank 0 has just written results; without this the other ranks would wait for it inside
    # the next timed step's all-reduce, and the writing would count as training.
    distributed.barrier()
    return math.isfinite(eval_loss)


def finish(run: Run, step: int, status: str, error: str | None) -> None:
    """Measurements (gathered across ranks: every rank calls this), then the run's files."""
    spec, device = run.spec, run.device
    metrics = {**NOT_PROFILED, **run.probes.metrics()}
    step_columns = run.probes.step_columns()
    rank_steps = run.probes.rank_steps()
    metrics.update(
        training_metrics(
            run.log, step, run.target, spec.cfg.train.target_evals, run.workload.target_metric
        )
    )
    metrics.update(sync_metrics(run.strategy, run.replicas.net, device))
    peak = spec.cfg.hardware.peak_tflops or known_peak_tflops(
        device_name(device), spec.cfg.precision
    )
    metrics.update(utilization(run.flops, metrics["samples_per_s"], run.replicas.devices, peak))
    tokens = run.workload.tokens_per_sample
    if tokens and metrics["samples_per_s"]:
        metrics["tokens_per_s"] = metrics["samples_per_s"] * tokens
    final_model = run.replicas.eval_model()  # on every rank: it may communicate
    metrics.update(test_metrics(run, final_model, metrics))
    if run.writer:
        run.writer.write_steps(step_rows(run, step_columns))
        if rank_steps:
            run.writer.write_rank_steps(rank_steps)
        if spec.cfg.train.save_params:
            save_params(final_model, run.writer.dir / "params.npz")
        wall = time.perf_counter() - run.wall0
        run.writer.finish(status, error=error, metrics=metrics, wall_time_s=wall)


# ---- setup ---------------------------------------------------------------------------------


@dataclass
class Run:
    """What one run's loop works with (built by ``setup``)."""

    spec: RunSpec
    ranks: Ranks
    device: torch.device
    writer: RunWriter | None
    workload: Workload
    source: BatchSource
    precision: Precision
    strategy: sync.SyncStrategy
    replicas: Replicas
    optimizer: torch.optim.Optimizer
    plan: LRPlan
    steps_per_epoch: int
    total_steps: int
    evals: set[int]
    probes: Probes
    flops: float | None
    reporter: progress.Reporter
    losses: LossTracker = field(init=False)
    shared_params: list[Tensor] = field(init=False)
    log: list[dict[str, Any]] = field(default_factory=list)
    wall0: float = field(default_factory=time.perf_counter)

    def __post_init__(self) -> None:
        self.losses = LossTracker(self.device)
        # Listed once, detached (views of the same storage, which the optimizer updates in
        # place): the divergence check reads them at every check, outside autograd.
        self.shared_params = [p.detach() for p in self.replicas.model.parameters()]

    @property
    def target(self) -> float:
        """The target metric's value counted as reaching the target."""
        return self.workload.target_value()


def setup(
    spec: RunSpec,
    ranks: Ranks,
    device: torch.device,
    writer: RunWriter | None,
    run_dir: Path | None = None,
) -> Run:
    wall0 = time.perf_counter()
    cfg = spec.cfg
    torch.set_num_threads(spec.threads_per_worker)
    workload = spec.build_workload()
    precision = Precision.create(cfg.precision, device)
    source = build_source(spec, workload, device, precision)
    source.start_eval_workers(ranks.rank, ranks.world_size, workload.eval_chunk)

    model, digest = build_model(spec, workload, device, precision)
    flops = None
    if writer:  # counted before DDP wraps the model, and only where results are written
        loss_of = loss_under_autocast(source.loss_of, precision)
        flops = training_flops_per_sample(model, loss_of, source.sample_batch(2))
    apply_step_options(cfg.step, model, source)
    world = ranks.world_size if distributed.active() else 1
    strategy = sync.build(cfg.sync, device, world, precision.name)
    replicas = build_replicas(spec, ranks, model, strategy, source, precision)
    optimizer = build_optimizer(spec, model, strategy)

    epoch_steps = steps_per_epoch(source.num_train, spec.global_batch)
    total_steps = epoch_steps * cfg.train.epochs
    if cfg.train.max_steps is not None:
        total_steps = min(total_steps, cfg.train.max_steps)
    plan = lr_plan(spec, epoch_steps, total_steps)
    probes = build_probes(spec, replicas, strategy, optimizer, precision, device, ranks, run_dir)

    if writer:
        record_setup(writer, model, digest, source, workload, (epoch_steps, total_steps))
    reporter = progress.current() if writer else progress.Reporter()
    reporter.run_started(spec.run_id, total_steps, epoch_steps)
    return Run(
        spec=spec,
        ranks=ranks,
        device=device,
        writer=writer,
        workload=workload,
        source=source,
        precision=precision,
        strategy=strategy,
        replicas=replicas,
        optimizer=optimizer,
        plan=plan,
        steps_per_epoch=epoch_steps,
        total_steps=total_steps,
        evals=eval_steps(epoch_steps, cfg.train.epochs, cfg.train.evals_per_epoch, total_steps),
        probes=probes,
        flops=flops,
        reporter=reporter,
        wall0=wall0,
    )


def build_model(
    spec: RunSpec, workload: Workload, device: torch.device, precision: Precision
) -> tuple[torch.nn.Module, str]:
    """The workload's model on the device, identical on every rank (checked: its digest)."""
    torch.manual_seed(spec.cfg.seed)
    model = workload_calls.build_model(workload).to(device=device, dtype=precision.param_dtype)
    return model, distributed.check_identical_replicas(model)


def record_setup(
    writer: RunWriter,
    model: torch.nn.Module,
    digest: str,
    source: BatchSource,
    workload: Workload,
    steps: tuple[int, int],
) -> None:
    """What run.json learns once the model and data are built (``steps``: per epoch, in all)."""
    epoch_steps, total_steps = steps
    writer.update(
        init_digest=digest,
        step_protocol=STEP_PROTOCOL,
        num_params=parameter_count(model),
        param_numels=[p.numel() for p in model.parameters() if p.requires_grad],
        steps_per_epoch=epoch_steps,
        total_steps=total_steps,
        train_samples=source.num_train,
        eval_samples=source.num_eval,
        synthetic_data=workload.synthetic_data,
        data_form=source.form,
    )


def build_source(
    spec: RunSpec, workload: Workload, device: torch.device, precision: Precision
) -> BatchSource:
    """The run's batches: the same data on every rank (in-memory tensors generated or read
    once per process, or Datasets each rank reads its own share of while training)."""
    data = data_memo.load_data(workload, spec.cfg.data.load_timeout_s)
    if isinstance(data, Data):
        data = on_device(data, device, precision.param_dtype)
    source = batch_source(data, workload, spec.cfg.data, device, precision.param_dtype)
    if source.num_train < spec.global_batch:
        raise workload_calls.WorkloadError(
            f"workload '{workload.config.name}': its train split has {source.num_train} "
            f"samples, fewer than the global batch {spec.global_batch}"
        )
    return source


def lr_plan(spec: RunSpec, epoch_steps: int, total_steps: int) -> LRPlan:
    cfg = spec.cfg
    return LRPlan(
        rule=cfg.lr_rule.name,
        base_lr=spec.base_lr,
        base_batch=spec.base_batch,
        global_batch=spec.global_batch,
        steps_per_epoch=epoch_steps,
        total_steps=total_steps,
        warmup_epochs=cfg.lr_rule.warmup_epochs,
        schedule=cfg.lr_rule.schedule,
        milestones=tuple(cfg.schedule.milestones),
        gamma=cfg.schedule.gamma,
        power=cfg.schedule.power,
        exponent=spec.lr_exponent,
        absolute_peak=spec.absolute_peak_lr,
    )


def device_name(device: torch.device) -> str | None:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else None


def apply_step_options(step, model: nn.Module, source: BatchSource) -> None:
    """channels_last (model and images) and torch.compile, in place."""
    if step.channels_last:
        model.to(memory_format=torch.channels_last)
        source.channels_last()
    if step.compile:
        model.compile()  # in place: same module, same state_dict keys, compiled on first call


def on_device(data: Data, device: torch.device, dtype: torch.dtype) -> Data:
    def move(t: Tensor) -> Tensor:
        return t.to(device, dtype) if t.is_floating_point() else t.to(device)

    test = [move(t) if t is not None else None for t in (data.test_x, data.test_y)]
    return Data(move(data.train_x), move(data.train_y), move(data.eval_x), move(data.eval_y), *test)


def build_replicas(
    spec: RunSpec, ranks: Ranks, model: nn.Module, strategy, source: BatchSource, precision
) -> Replicas:
    cfg = spec.cfg
    split = cfg.noise_scale.split_single
    if cfg.mode == "simulated":
        return SimulatedReplicas(
            model, spec.workers, spec.per_worker_batch, cfg.seed, source, precision, split
        )
    replicas = RankReplicas(
        model,
        strategy,
        ranks,
        spec.per_worker_batch,
        cfg.seed,
        source,
        precision,
        cfg.ddp.bucket_cap_mb,
        split,
    )
    hook = strategy.comm_hook()
    if hook is not None and not cfg.timing.comm_hook:
        hook.register(replicas.net)
    return replicas


def build_probes(
    spec: RunSpec,
    replicas: Replicas,
    strategy,
    optimizer: torch.optim.Optimizer,
    precision: Precision,
    device,
    ranks: Ranks,
    run_dir: Path | None = None,
) -> Probes:
    """The run's probes; the step timer first, so that it brackets the others' work."""
    cfg = spec.cfg
    timer = StepTimeProbe(
        device, cfg.timing.warmup_steps, spec.global_batch, spec.workers, strategy.period
    )
    data_wait = DataWaitProbe(timer)
    comm = comm_probe(spec, replicas, strategy, timer, device)
    probes: list[Probe] = [
        timer,
        data_wait,
        *([comm] if comm else []),
        MemoryProbe(device, spec.memory_estimate),
        MemoryPartsProbe(replicas.model, optimizer, device),
    ]
    noise = noise_scale_probe(spec, replicas, precision, device, ranks)
    if noise is not None:
        probes.append(noise)
    probes.append(ExposedCommProbe(timer, communicates=comm is not None, data_wait=data_wait))
    probes.append(RankTimelineProbe(timer, data_wait, comm, cfg.timing.max_rank_steps))
    profiler = profiler_probe(spec, ranks, device, run_dir)
    if profiler is not None:  # last: started before, and stopped after, every other probe
        probes.append(profiler)
    return Probes(probes)


def profiler_probe(
    spec: RunSpec, ranks: Ranks, device: torch.device, run_dir: Path | None
) -> ProfilerProbe | None:
    """torch.profiler over ``profile.steps`` steady-state steps, or None when off."""
    cfg = spec.cfg
    if not cfg.profile.steps or run_dir is None:
        return None
    first = cfg.timing.warmup_steps if cfg.profile.start is None else cfg.profile.start
    return ProfilerProbe(run_dir, ranks.rank, first, cfg.profile.steps, device)


def comm_probe(
    spec: RunSpec, replicas: Replicas, strategy, timer: StepTimeProbe, device: torch.device
) -> CommProbe | None:
    """Communication timing, for runs whose ranks communicate."""
    if not distributed.active():
        return None
    hook_timer = None
    if spec.cfg.timing.comm_hook and isinstance(replicas.net, nn.parallel.DistributedDataParallel):
        hook_timer = CommTimer(device)
        hook = strategy.comm_hook()
        if hook is None:  # DDP's own all-reduce, timed
            hook_timer.attach(replicas.net)
        else:  # (a strategy without one times its exchange where it waits)
            hook_timer.attach(
                replicas.net, hook.fn, hook.state, issued=lambda: strategy.counter.pending_ops
            )
    return CommProbe(
        replicas.net, strategy.counter, timer.timer, device, spec.cfg.timing.comm_every, hook_timer
    )


def noise_scale_probe(
    spec: RunSpec, replicas: Replicas, precision: Precision, device, ranks: Ranks
) -> NoiseScaleProbe | None:
    """The gradient-noise-scale probe of this run, or None when it is not measured."""
    noise_cfg = spec.cfg.noise_scale
    recorder = replicas.piece_recorder() if noise_cfg.enabled else None
    if recorder is None or replicas.noise_method is None:
        return None
    b_small, b_big = piece_batches(replicas.noise_method, spec.per_worker_batch, spec.global_batch)
    meter = NoiseScaleMeter(
        replicas.noise_method,
        noise_cfg.every,
        noise_cfg.window_steps,
        b_small,
        b_big,
        device,
        ranks.world_size,
    )
    model = replicas.model
    return NoiseScaleProbe(meter, recorder, lambda: gradients(model), precision.loss_scale)


def build_optimizer(
    spec: RunSpec, model: nn.Module, strategy: sync.SyncStrategy
) -> torch.optim.Optimizer:
    """Momentum SGD, or LARS for rules that ask for it (the LR is set every step by the plan),
    built by the strategy over the wrapped model's parameters (it may shard its state)."""
    opt = spec.cfg.optimizer
    if RULES[spec.cfg.lr_rule.name].optimizer == "lars":
        options = {
            "momentum": opt.momentum,
            "trust_coefficient": spec.cfg.lr_rule.trust_coefficient,
        }
        params = lars_param_groups(model, opt.weight_decay)
        return strategy.build_optimizer(LARS, params, {"lr": spec.base_lr, **options})
    kernels = {
        "foreach": {"foreach": True},
        "for_loop": {"foreach": False},
        "fused": {"fused": True},
    }
    options = {
        "lr": spec.base_lr,
        "momentum": opt.momentum,
        "weight_decay": opt.weight_decay,
        "nesterov": opt.nesterov,
        **kernels.get(opt.implementation, {}),
    }
    return strategy.build_optimizer(torch.optim.SGD, list(model.parameters()), options)


def eval_steps(epoch_steps: int, epochs: int, per_epoch: int, total_steps: int) -> set[int]:
    points = {
        round(e * epoch_steps + k * epoch_steps / per_epoch)
        for e in range(epochs)
        for k in range(1, per_epoch + 1)
    }
    return {s for s in points if 0 < s <= total_steps} | {total_steps}


def calibrate(run: Run) -> None:
    """The run's own steps timed without communication, all state restored after; the probes
    get their durations."""
    steps = run.spec.cfg.timing.calibration_steps
    if not distributed.active() or steps == 0 or not run.strategy.calibrates:
        return  # one process: nothing to take out of its steps (or no step without it)
    warm = run.spec.cfg.timing.warmup_steps

    def plain_step(batch: Any) -> None:
        run.optimizer.zero_grad(set_to_none=True)
        run.replicas.forward_backward(batch)
        run.precision.step(run.optimizer)
        run.replicas.after_step()

    run.replicas.net.train()
    run.probes.on_calibration_start()
    times = time_without_sync(
        run.replicas.model,
        run.replicas.no_sync(),
        run.optimizer,
        run.precision,
        plain_step,
        run.replicas.batches(),
        warm,
        steps,
        run.device,
    )
    run.probes.on_calibration_end(times)


# ---- evaluation and bookkeeping -----------------------------------------------------------


def evaluate(run: Run, model: nn.Module, split: str) -> tuple[float, float]:
    """Loss and accuracy (NaN for a workload without one) on a whole split, each rank taking
    every world-th sample."""
    ranks, workload = run.ranks, run.workload
    batches = run.source.eval_batches(split, ranks.rank, ranks.world_size, workload.eval_chunk)
    model.eval()
    loss_sum = correct = count = 0.0
    with torch.no_grad():
        for batch in batches:
            with run.precision.autocast():
                loss, ok, n = workload.batch_metrics(model, batch)
            loss_sum += float(loss) * n
            correct += math.nan if ok is None else float(ok)
            count += n
    model.train()
    loss_sum, correct, count = distributed.all_reduce_sum([loss_sum, correct, count], run.device)
    if not count:
        raise DataProblem(f"the {split} split gave no samples to evaluate")
    return loss_sum / count, correct / count


class LossTracker:
    """Training losses kept on the device: gathered into one tensor at each check, summed
    there and read on the host, summed across ranks, only at evaluations (where the ranks
    meet anyway)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.pending: list[Tensor] = []  # this rank's losses since the last check
        self.chunks: list[Tensor] = []  # per check since the last window: its losses
        self.counts: list[float] = []  # and how many

    def add(self, loss: Tensor) -> None:
        # One cheap append per step (no arithmetic, no device sync); gathered at the next check.
        self.pending.append(loss)

    def close_chunk(self) -> tuple[Tensor, float]:
        """Gather what is pending into one tensor, on the device (no host read, no sum: a
        check sums it only where it shows the loss): (this rank's losses, how many)."""
        if self.pending:
            chunk = torch.stack(self.pending)
        else:
            chunk = torch.zeros(0, dtype=torch.float64, device=self.device)
        count = float(len(self.pending))
        self.pending.clear()
        self.chunks.append(chunk)
        self.counts.append(count)
        return chunk, count

    @staticmethod
    def total(chunk: Tensor) -> Tensor:
        """A check's losses summed in float64, on the device."""
        return chunk.double().sum()

    def take_window(self) -> float:
        """Mean loss since the last call (global across ranks: every rank calls this)."""
        if self.pending:
            self.close_chunk()
        n = len(self.chunks)
        local = torch.stack([self.total(c) for c in self.chunks]).tolist() if n else []
        totals = distributed.all_reduce_sum(local + self.counts, self.device) if n else []
        self.chunks.clear()
        self.counts.clear()
        # Summed check by check, in order: the same floats as when each check met.
        window_sum = window_n = 0.0
        for total, count in zip(totals[:n], totals[n:], strict=True):
            window_sum += total
            window_n += count
        return window_sum / window_n if window_n else float("nan")


def target_hit(
    log: list[dict[str, Any]], target: float, evals: int, metric: str = "eval_acc"
) -> dict[str, Any] | None:
    """The evaluation counted as reaching the target, or None: the first window of ``evals``
    consecutive evaluations whose median ``metric`` reaches it (at least ``target`` for an
    accuracy, at most for a loss), counted at the window's middle (a moving median: one noisy
    evaluation neither reaches the target nor misses it)."""
    higher = metric != "eval_loss"
    for end in range(evals, len(log) + 1):
        window = [r[metric] for r in log[end - evals : end]]
        if not all(math.isfinite(a) for a in window):
            continue
        middle = float(np.median(window))
        if (middle >= target) if higher else (middle <= target):
            return log[end - 1 - evals // 2]
    return None


def test_metrics(run: Run, model: nn.Module, metrics: dict[str, Any]) -> dict[str, Any]:
    """Which split the evaluations used, and the final model's loss and accuracy on the test
    split: evaluated once here when the evaluations were on a validation split."""
    split = run.source.eval_split
    if split == "test":
        loss, acc = metrics["final_eval_loss"], metrics["final_eval_acc"]
    else:
        loss, acc = evaluate(run, model, "test")
    return {"eval_split": split, "final_test_loss": loss, "final_test_acc": acc}


def training_metrics(
    log: list[dict[str, Any]],
    step: int,
    target: float,
    target_evals: int = 1,
    metric: str = "eval_acc",
) -> dict[str, Any]:
    last = log[-1] if log else {}
    hit = target_hit(log, target, target_evals, metric)
    accs = [r["eval_acc"] for r in log if math.isfinite(r["eval_acc"])]
    train_losses = [r["train_loss"] for r in log if math.isfinite(r["train_loss"])]
    return {
        "steps": step,
        "final_train_loss": train_losses[-1] if train_losses else None,
        "final_eval_loss": last.get("eval_loss"),
        "final_eval_acc": last.get("eval_acc"),
        "best_eval_acc": max(accs) if accs else None,
        "steps_to_target": hit["step"] if hit else None,
        "epochs_to_target": hit["epoch"] if hit else None,
    }


def step_rows(run: Run, columns: dict[int, dict[str, Any]]):
    """steps.csv: every timed step (sampled if long) with the probes' columns and its LR."""
    steps = list(columns)
    for i in sample_indices(len(steps), run.spec.cfg.timing.max_recorded_steps):
        yield {"step": steps[i], **columns[steps[i]], "lr": run.plan.lr_at(steps[i])}


def save_params(model: nn.Module, path) -> None:
    """Final parameters as a plain .npz (no pickle), for equivalence checks."""
    arrays = {k: v.detach().cpu().numpy() for k, v in model.state_dict().items()}
    np.savez(path, **arrays)
