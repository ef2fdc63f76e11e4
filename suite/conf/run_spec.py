"""Turn a composed Hydra config into a checked run specification: the typed config and what
follows from it on this machine (worker count, batches, device, backend, threads, run id)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from dpsuite import sync
from dpsuite.conf.checks import check_bounds, check_keys
from dpsuite.conf.memory_check import check_memory_fits
from dpsuite.conf.schema import RunConfig
from dpsuite.conf.sync_checks import check_sync_combination
from dpsuite.errors import UserError
from dpsuite.optim import lr_rules
from dpsuite.optim.lr_rules import SCHEDULES
from dpsuite.optim.precision import unsupported
from dpsuite.results import make_run_id, run_identity
from dpsuite.results.gate import TAG_PATTERN
from dpsuite.runtime.host import check_writable, resolve_backend, usable_cores
from dpsuite.runtime.host_memory import check_processes_fit


@dataclass(frozen=True)
class RunSpec:
    """Everything one run needs, checked: the typed config and what it resolves to here."""

    cfg: RunConfig
    run_id: str
    workers: int
    per_worker_batch: int
    global_batch: int
    device: str
    backend: str
    threads_per_worker: int
    local_workers: int  # ranks of this run on this host (1 in simulated mode)
    config: dict[str, Any] = field(repr=False)  # the resolved config as recorded in run.json
    train_samples: int = 0  # the workload's training set (0: not known)
    workload_label: str = ""  # the workload as results name it (its model: torchvision-resnet50)
    memory_estimate: int | None = None  # bytes a rank needs, estimated (None: not estimated)
    target_metric: str = "eval_acc"  # what steps-to-target counts (the workload says)

    @property
    def processes(self) -> int:
        """Processes this run needs on this host: its workers, or 1 in simulated mode."""
        return 1 if self.cfg.mode == "simulated" else self.local_workers

    @property
    def run_dir(self) -> Path:
        return Path(self.cfg.results_dir).expanduser() / self.run_id

    @property
    def base_lr(self) -> float:
        return self.cfg.lr_rule.base_lr

    @property
    def base_batch(self) -> int:
        return self.cfg.workload.base_batch

    @property
    def target_acc(self) -> float | None:
        return self.cfg.workload.target_acc if self.target_metric == "eval_acc" else None

    def target_fields(self) -> dict[str, Any]:
        """What the run counts as reaching its target: an accuracy (as runs always recorded it)
        or, for a workload scored by its loss, that loss."""
        if self.target_metric == "eval_acc":
            return {"target_acc": self.target_acc}
        return {
            "target_acc": None,
            "target_metric": self.target_metric,
            "target_loss": self.cfg.workload.target_loss,
        }

    @property
    def lr_exponent(self) -> float:
        """Peak LR = base_lr x (global batch / base batch) ** this."""
        return lr_rules.exponent_of(
            self.cfg.lr_rule.name, getattr(self.cfg.lr_rule, "exponent", None)
        )

    @property
    def peak_lr(self) -> float:
        rule = self.cfg.lr_rule.name
        return lr_rules.peak_lr(
            rule,
            self.base_lr,
            self.base_batch,
            self.global_batch,
            self.lr_exponent,
            self.absolute_peak_lr,
        )

    @property
    def absolute_peak_lr(self) -> float | None:
        """The power rule's absolute peak LR, when one is set."""
        return getattr(self.cfg.lr_rule, "peak_lr", None)

    @property
    def warmup_epochs(self) -> float:
        """Epochs of warmup this run does: none for a rule without it, or without a rise."""
        warms = lr_rules.RULES[self.cfg.lr_rule.name].warms_up and self.peak_lr > self.base_lr
        return self.cfg.lr_rule.warmup_epochs if warms else 0.0

    @property
    def expected_steps(self) -> int:
        """Optimizer steps the config asks for (its budget: a run stopping at its target may
        take fewer), and the untimed warmup and calibration steps before them."""
        c = self.cfg
        steps = self.train_samples // self.global_batch * c.train.epochs
        if c.train.max_steps is not None:
            steps = min(steps, c.train.max_steps)
        return steps + c.timing.warmup_steps + c.timing.calibration_steps

    def summary(self) -> dict[str, Any]:
        """The top-level run.json keys (see `dpsuite.results.schema`)."""
        c = self.cfg
        return {
            "run_id": self.run_id,
            "workload": self.workload_label or c.workload.name,
            "mode": c.mode,
            "workers": self.workers,
            "per_worker_batch": self.per_worker_batch,
            "global_batch": self.global_batch,
            "lr_rule": c.lr_rule.name,
            "base_lr": self.base_lr,
            "base_batch": self.base_batch,
            "lr_exponent": self.lr_exponent,
            "peak_lr": self.peak_lr,
            "warmup_epochs": self.warmup_epochs,
            "epochs": c.train.epochs,
            "seed": c.seed,
            "repeat": c.repeat,
            "precision": c.precision,
            "threads_per_worker": self.threads_per_worker,
            **self.target_fields(),
            "momentum": c.optimizer.momentum,
            "weight_decay": c.optimizer.weight_decay,
            "schedule": c.lr_rule.schedule,
            "device": self.device,
            "backend": self.backend,
            "bucket_cap_mb": c.ddp.bucket_cap_mb,
            "sync": c.sync.name,
            "sync_label": c.sync.label,
            **lr_rules.traits(c.lr_rule.name),
            **sync.traits(c.sync.name),
        }

    def build_workload(self):  # -> dpsuite.workloads.Workload
        from dpsuite.workloads import lookup

        return lookup(self.cfg.workload.name)(self.cfg.workload, cache_dir=self.cfg.cache_dir)


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise UserError(message)


def _cuda_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def resolve_device(device: str, workers_per_host: int, mode: str) -> str:
    gpus = _cuda_count()
    if device == "auto":
        return "cuda" if gpus > 0 else "cpu"
    if device == "cuda":
        _require(gpus > 0, "device=cuda but no CUDA device is available")
        _require(
            mode == "simulated" or workers_per_host <= gpus,
            f"workers={workers_per_host} but only {gpus} CUDA device(s): one GPU per worker",
        )
    return device


def typed_config(cfg: DictConfig) -> tuple[RunConfig, dict[str, Any]]:
    """The config as objects (every default filled, interpolations resolved) and as the plain
    dict run.json records; UserError for unknown keys, bad values or broken interpolations."""
    check_keys(cfg)
    try:
        container = OmegaConf.to_container(cfg, resolve=True)
        obj = OmegaConf.to_object(cfg)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"{key}: {first}" if key else f"config does not resolve: {first}") from None
    assert isinstance(container, dict) and isinstance(obj, RunConfig)
    container.pop("hydra", None)
    check_bounds(obj)
    return obj, container


def _batches(batch: dict[str, int | None], workers: int) -> tuple[int, int]:
    per_worker, global_batch = batch.get("per_worker"), batch.get("global")
    if global_batch is not None:
        _require(global_batch >= 1, f"batch.global must be an integer >= 1, got {global_batch}")
        _require(
            global_batch % workers == 0,
            f"batch.global={global_batch} is not divisible by workers={workers}",
        )
        return global_batch // workers, global_batch
    _require(
        per_worker is not None and per_worker >= 1,
        f"batch.per_worker must be an integer >= 1, got {per_worker!r}",
    )
    assert per_worker is not None
    return per_worker, per_worker * workers


def _workload_class(c: RunConfig) -> type:
    """The chosen workload's class, its config checked by the workload itself."""
    from dpsuite.workloads import PluginError, lookup

    try:
        workload_cls = lookup(c.workload.name)
    except PluginError as exc:
        raise UserError(str(exc)) from None
    try:  # the workload checks what its field bounds cannot (paths, shapes that must agree)
        c.workload.check()
    except (TypeError, ValueError, OSError) as exc:
        raise UserError(f"workload '{c.workload.name}': {exc}") from None
    return workload_cls


def _check_combinations(c: RunConfig, workers: int, world_size: int | None) -> None:
    """Mode, sync strategy, schedule and warmup that cannot go together."""
    _require(
        not (c.mode == "simulated" and world_size not in (None, 1)),
        "mode=simulated runs in one process: do not start it under torchrun/srun",
    )
    _require(
        c.mode == "ddp" or c.sync.name == "allreduce",
        f"sync={c.sync.name} needs real workers: mode=simulated supports only sync=allreduce",
    )
    try:
        c.sync.check(workers)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    _require(
        c.lr_rule.schedule in SCHEDULES,
        f"lr_rule.schedule must be one of {', '.join(SCHEDULES)}, got '{c.lr_rule.schedule}'",
    )
    _require(
        c.lr_rule.warmup_epochs <= c.train.epochs,
        f"lr_rule.warmup_epochs must be in [0, epochs={c.train.epochs}]",
    )


def _device_and_backend(c: RunConfig, local_workers: int, check_devices: bool) -> tuple[str, str]:
    """The device and backend this host gives the run (as configured when not checked here)."""
    if not check_devices:
        return c.device, c.backend
    device = resolve_device(c.device, local_workers, c.mode)
    backend = resolve_backend(c.backend, device)
    problem = unsupported(c.precision, device)
    _require(problem is None, problem or "")
    return device, backend


def _check_tag_and_results_dir(c: RunConfig, check_results_dir: bool) -> None:
    tag = c.hardware.tag
    _require(
        tag is None or TAG_PATTERN.fullmatch(tag) is not None,
        f"hardware.tag must be a machine name (letters, digits, '_', '.', '+', '-'; up to 64), "
        f"got {tag!r}",
    )
    if check_results_dir:
        check_writable(c.results_dir)
    else:
        _require(bool(c.results_dir.strip()), "results_dir is empty: name a directory")


def _train_samples(c: RunConfig, workload: Any, global_batch: int) -> int:
    """The training set's size, which must hold at least one global batch."""
    try:
        num_train = workload.num_train()
    except (OSError, ValueError) as exc:
        raise UserError(f"workload '{c.workload.name}': {exc}") from None
    _require(
        global_batch <= num_train,
        f"global batch {global_batch} is larger than the training set ({num_train} samples of "
        f"{c.workload.name}): lower the batch or raise workload.num_samples",
    )
    return num_train


def _run_id(
    c: RunConfig, container: dict[str, Any], label: str, workers: int, global_batch: int
) -> str:
    """The run's id: its readable summary and the hash of everything that identifies it."""
    summary = {
        "workload": label,
        "mode": c.mode,
        "workers": workers,
        "global_batch": global_batch,
        "lr_rule": c.lr_rule.name,
        "seed": c.seed,
        "repeat": c.repeat,
        "sync": c.sync.name,
    }
    return make_run_id(summary, run_identity(container, workers, global_batch))


def resolve(
    cfg: DictConfig,
    world_size: int | None = None,
    local_world_size: int | None = None,
    check_devices: bool = True,
    check_results_dir: bool = True,
) -> RunSpec:
    """Validate ``cfg`` and resolve everything that depends on this machine.

    ``world_size`` is given when the ranks already exist (torchrun, srun): it then decides the
    number of workers, whatever ``workers`` says. ``check_devices=False`` leaves device checks
    to the machine the run will start on (a sweep submitted to a cluster from a login node).
    """
    c, container = typed_config(cfg)
    workload_cls = _workload_class(c)
    workers = world_size if world_size is not None else c.workers
    _check_combinations(c, workers, world_size)
    per_worker, global_batch = _batches(c.batch, workers)

    local_workers = local_world_size or (1 if c.mode == "simulated" else workers)
    device, backend = _device_and_backend(c, local_workers, check_devices)
    processes = 1 if c.mode == "simulated" else local_workers
    if check_devices and world_size is None and processes > 1:  # this command spawns them
        check_processes_fit(processes, "workers")
    _check_tag_and_results_dir(c, check_results_dir)
    threads = c.threads_per_worker or max(1, usable_cores() // processes)

    workload = workload_cls(c.workload, cache_dir=c.cache_dir)
    num_train = _train_samples(c, workload, global_batch)
    check_sync_combination(c, workload, device if check_devices else None)
    # The model's memory on this host (a GPU run keeps it on the device): before any rank starts.
    estimate = None
    if check_devices and world_size is None and device == "cpu":
        estimate = check_memory_fits(c, workload, per_worker, global_batch, processes).per_rank

    label = workload.label()
    return RunSpec(
        cfg=c,
        run_id=_run_id(c, container, label, workers, global_batch),
        workers=workers,
        per_worker_batch=per_worker,
        global_batch=global_batch,
        device=device,
        backend=backend,
        threads_per_worker=threads,
        local_workers=local_workers,
        config=container,
        train_samples=num_train,
        workload_label=label,
        memory_estimate=estimate,
        target_metric=workload_cls.target_metric,
    )
