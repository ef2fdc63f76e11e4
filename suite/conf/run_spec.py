"""Turn a composed Hydra config into a validated, fully resolved run specification."""

from __future__ import annotations

import copy
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from suite.engine import lr_rules
from suite.engine.precision import PRECISIONS, unsupported
from suite.errors import UserError
from suite.measure.noise_scale import NoiseScaleSettings
from suite.sync.spec import SyncSpec
from suite.sync.spec import parse as parse_sync

MODES = ("ddp", "simulated")
DEVICES = ("auto", "cpu", "cuda")
BACKENDS = ("auto", "gloo", "nccl")
# Config keys that do not change what is measured, so they stay out of the run id.
NON_IDENTITY_KEYS = (
    "results_dir",
    "force",
    "cache_dir",
    "hardware",
    "ddp.start_method",
    "ddp.timeout_s",
    "train.save_params",
    "noise_scale",  # measured alongside; the training is the same whether it is on or off
)
REFERENCE_KEYS = ("name", "base_lr", "base_batch", "epochs", "target_acc")


@dataclass(frozen=True)
class RunSpec:
    """Everything one run needs, checked and resolved (no nulls left to interpret)."""

    workload: str
    workload_params: dict[str, Any]
    mode: str
    workers: int
    per_worker_batch: int
    global_batch: int
    lr_rule: str
    base_lr: float
    base_batch: int
    peak_lr: float
    warmup_epochs: float
    epochs: int
    target_acc: float
    momentum: float
    weight_decay: float
    nesterov: bool
    schedule: str
    milestones: tuple[float, ...]
    gamma: float
    power: float
    trust_coefficient: float
    seed: int
    repeat: int
    precision: str
    device: str
    backend: str
    threads_per_worker: int
    evals_per_epoch: int
    eval_at_start: bool
    check_every: int
    max_steps: int | None
    save_params: bool
    bucket_cap_mb: float
    timeout_s: float
    start_method: str
    timing_warmup_steps: int
    calibration_steps: int
    comm_hook: bool
    max_recorded_steps: int
    results_dir: str
    cache_dir: str
    hardware_tag: str | None
    peak_tflops: float | None
    force: bool
    run_id: str
    config: dict[str, Any] = field(repr=False)
    sync: SyncSpec = field(default_factory=SyncSpec)
    noise_scale: NoiseScaleSettings = field(default_factory=NoiseScaleSettings)

    @property
    def run_dir(self) -> Path:
        return Path(self.results_dir) / self.run_id

    def summary(self) -> dict[str, Any]:
        """The top-level run.json keys of the results contract."""
        keys = (
            "run_id",
            "workload",
            "mode",
            "workers",
            "per_worker_batch",
            "global_batch",
            "lr_rule",
            "base_lr",
            "base_batch",
            "peak_lr",
            "warmup_epochs",
            "epochs",
            "seed",
            "repeat",
            "precision",
            "threads_per_worker",
            "target_acc",
            "momentum",
            "weight_decay",
            "schedule",
            "device",
            "backend",
            "bucket_cap_mb",
        )
        d = asdict(self)
        return {**{k: d[k] for k in keys}, "sync": self.sync.name, "sync_label": self.sync.label}

    def build_workload(self):  # -> workloads.Workload
        from workloads import get_workload

        return get_workload(self.workload, cache_dir=self.cache_dir, **self.workload_params)


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise UserError(message)


def _positive_int(value: Any, name: str, minimum: int = 1) -> int:
    _require(
        isinstance(value, int) and not isinstance(value, bool) and value >= minimum,
        f"{name} must be an integer >= {minimum}, got {value!r}",
    )
    return int(value)


def _flag(value: Any, name: str) -> bool:
    _require(isinstance(value, bool), f"{name} must be true or false, got {value!r}")
    return value


def _number(value: Any, name: str) -> float:
    _require(
        isinstance(value, (int, float)) and not isinstance(value, bool),
        f"{name} must be a number, got {value!r}",
    )
    return float(value)


def _cuda_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def resolve_device(device: str, workers_per_host: int, mode: str) -> str:
    _require(device in DEVICES, f"device must be one of {', '.join(DEVICES)}, got '{device}'")
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


def resolve_backend(backend: str, device: str) -> str:
    _require(backend in BACKENDS, f"backend must be one of {', '.join(BACKENDS)}, got '{backend}'")
    if backend == "auto":
        return "nccl" if device == "cuda" else "gloo"
    _require(not (backend == "nccl" and device != "cuda"), "backend=nccl needs device=cuda")
    return backend


def check_writable(results_dir: str) -> None:
    """Fail now, not after an hour of training, if results cannot be written."""
    path = Path(results_dir).expanduser()
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write-test-"):
            pass
    except OSError as exc:
        raise UserError(f"results_dir '{results_dir}' is not writable: {exc.strerror}") from None


def _batches(cfg: DictConfig, workers: int) -> tuple[int, int]:
    per_worker, global_batch = cfg.batch.per_worker, cfg.batch["global"]
    if global_batch is not None:
        global_batch = _positive_int(global_batch, "batch.global")
        _require(
            global_batch % workers == 0,
            f"batch.global={global_batch} is not divisible by workers={workers}",
        )
        return global_batch // workers, global_batch
    per_worker = _positive_int(per_worker, "batch.per_worker")
    return per_worker, per_worker * workers


def resolve(
    cfg: DictConfig,
    world_size: int | None = None,
    local_world_size: int | None = None,
    check_devices: bool = True,
) -> RunSpec:
    """Validate ``cfg`` and resolve every default. Raises UserError on bad input.

    ``world_size`` is given when the ranks already exist (torchrun, srun): it then decides the
    number of workers, whatever ``workers`` says. ``check_devices=False`` leaves device checks
    to the machine the run will start on (a sweep submitted to a cluster from a login node).
    """
    from workloads import REGISTRY

    try:
        container = OmegaConf.to_container(cfg, resolve=True)
    except Exception as exc:  # an interpolation that cannot resolve
        raise UserError(f"config does not resolve: {str(exc).splitlines()[0]}") from None
    assert isinstance(container, dict)
    container.pop("hydra", None)

    w = cfg.workload
    _require(
        w.name in REGISTRY,
        f"unknown workload '{w.name}' (choose from: {', '.join(sorted(REGISTRY))})",
    )
    rule = cfg.lr_rule.name
    _require(
        rule in lr_rules.RULES,
        f"unknown lr_rule '{rule}' (choose from: {', '.join(lr_rules.RULES)})",
    )
    mode = cfg.mode
    _require(mode in MODES, f"mode must be one of {', '.join(MODES)}, got '{mode}'")
    workers = _positive_int(world_size if world_size is not None else cfg.workers, "workers")
    _require(
        not (mode == "simulated" and world_size not in (None, 1)),
        "mode=simulated runs in one process: do not start it under torchrun/srun",
    )
    per_worker, global_batch = _batches(cfg, workers)
    sync = parse_sync(container.get("sync") or {"name": "allreduce"}, mode)

    ref = REGISTRY[w.name].reference
    rule_lr = cfg.lr_rule.get("base_lr")  # a rule on its own LR scale (lars) carries its own
    lr_key = "lr_rule.base_lr" if rule_lr is not None else "workload.base_lr"
    base_lr = _number(
        rule_lr if rule_lr is not None else (w.base_lr if w.base_lr is not None else ref.base_lr),
        lr_key,
    )
    _require(base_lr > 0, f"{lr_key} must be > 0, got {base_lr}")
    base_batch = _positive_int(w.base_batch or ref.base_batch, "workload.base_batch")
    epochs = _positive_int(
        cfg.train.epochs if cfg.train.epochs is not None else (w.epochs or ref.epochs),
        "train.epochs",
    )
    warmup_epochs = _number(cfg.lr_rule.get("warmup_epochs", 0) or 0, "lr_rule.warmup_epochs")
    _require(0 <= warmup_epochs <= epochs, f"lr_rule.warmup_epochs must be in [0, epochs={epochs}]")
    schedule = cfg.lr_rule.get("schedule") or cfg.schedule.name
    _require(
        schedule in lr_rules.SCHEDULES,
        f"schedule.name must be one of {', '.join(lr_rules.SCHEDULES)}, got '{schedule}'",
    )
    _require(
        cfg.optimizer.name == "sgd", f"optimizer.name must be 'sgd', got '{cfg.optimizer.name}'"
    )
    momentum = _number(cfg.optimizer.momentum, "optimizer.momentum")
    _require(0 <= momentum < 1, f"optimizer.momentum must be in [0, 1), got {momentum}")
    wd = cfg.optimizer.weight_decay
    weight_decay = _number(wd if wd is not None else ref.weight_decay, "optimizer.weight_decay")
    _require(weight_decay >= 0, f"optimizer.weight_decay must be >= 0, got {weight_decay}")
    _require(
        cfg.precision in PRECISIONS,
        f"precision must be one of {', '.join(PRECISIONS)}, got '{cfg.precision}'",
    )

    local_workers = local_world_size or (1 if mode == "simulated" else workers)
    if check_devices:
        device = resolve_device(cfg.device, local_workers, mode)
        backend = resolve_backend(cfg.backend, device)
        problem = unsupported(cfg.precision, device)
        _require(problem is None, problem or "")
    else:
        _require(cfg.device in DEVICES, f"device must be one of {', '.join(DEVICES)}")
        _require(cfg.backend in BACKENDS, f"backend must be one of {', '.join(BACKENDS)}")
        device, backend = str(cfg.device), str(cfg.backend)
    bucket_cap_mb = _number(cfg.ddp.bucket_cap_mb, "ddp.bucket_cap_mb")
    _require(bucket_cap_mb > 0, f"ddp.bucket_cap_mb must be > 0, got {bucket_cap_mb}")
    procs_here = 1 if mode == "simulated" else local_workers
    threads = cfg.threads_per_worker
    threads = (
        max(1, usable_cores() // procs_here)
        if threads is None
        else _positive_int(threads, "threads_per_worker")
    )
    max_steps = cfg.train.max_steps
    if max_steps is not None:
        max_steps = _positive_int(max_steps, "train.max_steps")
    target = w.target_acc if w.target_acc is not None else ref.target_acc
    results_dir = str(cfg.results_dir)
    check_writable(results_dir)

    workload_params = {k: v for k, v in container["workload"].items() if k not in REFERENCE_KEYS}
    try:  # the workload checks its own parameters (sizes, paths) before any work
        REGISTRY[w.name](cache_dir=container["cache_dir"], **workload_params)
    except (TypeError, ValueError, OverflowError) as exc:
        raise UserError(f"workload '{w.name}': {exc}") from None

    identity = _identity(container, workers, global_batch)
    summary = {
        "workload": w.name,
        "mode": mode,
        "workers": workers,
        "global_batch": global_batch,
        "lr_rule": rule,
        "seed": cfg.seed,
        "repeat": cfg.repeat,
        "sync": sync.name,
    }
    from suite.results import make_run_id

    return RunSpec(
        workload=w.name,
        workload_params=workload_params,
        mode=mode,
        workers=workers,
        per_worker_batch=per_worker,
        global_batch=global_batch,
        lr_rule=rule,
        base_lr=base_lr,
        base_batch=base_batch,
        peak_lr=lr_rules.peak_lr(rule, base_lr, base_batch, global_batch),
        warmup_epochs=warmup_epochs if rule in lr_rules.WARMUP_RULES else 0.0,
        epochs=epochs,
        target_acc=float(target),
        momentum=momentum,
        weight_decay=weight_decay,
        nesterov=bool(cfg.optimizer.nesterov),
        schedule=schedule,
        milestones=tuple(float(m) for m in cfg.schedule.milestones),
        gamma=_number(cfg.schedule.gamma, "schedule.gamma"),
        power=_number(cfg.schedule.power, "schedule.power"),
        trust_coefficient=_trust_coefficient(cfg),
        seed=_positive_int(cfg.seed, "seed", 0),
        repeat=_positive_int(cfg.repeat, "repeat", 0),
        precision=cfg.precision,
        device=device,
        backend=backend,
        threads_per_worker=threads,
        evals_per_epoch=_positive_int(cfg.train.evals_per_epoch, "train.evals_per_epoch"),
        eval_at_start=bool(cfg.train.eval_at_start),
        check_every=_positive_int(cfg.train.check_every, "train.check_every"),
        max_steps=max_steps,
        save_params=bool(cfg.train.save_params),
        bucket_cap_mb=bucket_cap_mb,
        timeout_s=_number(cfg.ddp.timeout_s, "ddp.timeout_s"),
        start_method=str(cfg.ddp.start_method),
        timing_warmup_steps=_positive_int(cfg.timing.warmup_steps, "timing.warmup_steps", 0),
        calibration_steps=_positive_int(
            cfg.timing.calibration_steps, "timing.calibration_steps", 0
        ),
        max_recorded_steps=_positive_int(
            cfg.timing.max_recorded_steps, "timing.max_recorded_steps"
        ),
        comm_hook=_comm_hook(cfg, sync.name),
        results_dir=results_dir,
        cache_dir=str(container["cache_dir"]),
        hardware_tag=cfg.hardware.tag,
        peak_tflops=_peak_tflops(cfg),
        force=bool(cfg.force),
        run_id=make_run_id(summary, identity),
        config=container,
        sync=sync,
        noise_scale=_noise_scale(cfg),
    )


def _peak_tflops(cfg: DictConfig) -> float | None:
    peak = cfg.hardware.get("peak_tflops")
    if peak is None:
        return None
    peak = _number(peak, "hardware.peak_tflops")
    _require(peak > 0, f"hardware.peak_tflops must be > 0, got {peak}")
    return peak


def _comm_hook(cfg: DictConfig, sync: str) -> bool:
    hooked = _flag(cfg.timing.get("comm_hook", True), "timing.comm_hook")
    _require(
        hooked or sync == "allreduce",
        f"timing.comm_hook=false needs sync=allreduce: sync={sync} communicates in its hook",
    )
    return hooked


def _noise_scale(cfg: DictConfig) -> NoiseScaleSettings:
    ns = cfg.get("noise_scale") or {}
    defaults = NoiseScaleSettings()
    ema = _number(ns.get("ema", defaults.ema), "noise_scale.ema")
    _require(0 < ema < 1, f"noise_scale.ema must be in (0, 1), got {ema}")
    return NoiseScaleSettings(
        enabled=_flag(ns.get("enabled", defaults.enabled), "noise_scale.enabled"),
        every=_positive_int(ns.get("every", defaults.every), "noise_scale.every"),
        ema=ema,
        split_single=_flag(
            ns.get("split_single", defaults.split_single), "noise_scale.split_single"
        ),
    )


def _trust_coefficient(cfg: DictConfig) -> float:
    eta = _number(cfg.lr_rule.get("trust_coefficient", 0.001), "lr_rule.trust_coefficient")
    _require(eta > 0, f"lr_rule.trust_coefficient must be > 0, got {eta}")
    return eta


def _identity(container: dict[str, Any], workers: int, global_batch: int) -> dict[str, Any]:
    """The part of the config that defines the experiment (what the run id hashes)."""
    ident = copy.deepcopy(container)
    for dotted in NON_IDENTITY_KEYS:
        *parents, leaf = dotted.split(".")
        node = ident
        for p in parents:
            node = node.get(p, {})
        node.pop(leaf, None)
    ident["workers"], ident["global_batch"] = workers, global_batch
    ident.pop("batch", None)  # per_worker/global are two spellings of one thing
    if ident.get("sync") == {"name": "allreduce"}:  # the default: all-reduce runs keep their ids
        ident.pop("sync")
    return ident
