"""The run config as structured configs: every key, its type, its default and what it means.

This is the one source of defaults. ``conf/config.yaml`` only chooses the config groups and sets
Hydra up; the sweep presets in ``conf/sweep/`` only override. Config groups are registered from
their owners: each workload's ``Config`` (``workloads/configs/``), each LR rule's
(``optim/lr_rules``) and each synchronization strategy's (``sync/config``); none of them imports
torch, so composing a config (help, completion) stays quick.

A string right below a field documents it (``dpsuite run --help`` prints them); field metadata
gives the bounds ``dpsuite.conf.checks`` enforces (``ge``, ``gt``, ``le``, ``lt``, ``choices``).
Values that default to another key are interpolations: ``train.epochs`` is
``${workload.epochs}`` unless set.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import II, MISSING

from dpsuite.errors import UserError
from dpsuite.optim.lr_rules import SCHEDULES

MODES = ("ddp", "simulated")
DEVICES = ("auto", "cpu", "cuda")
BACKENDS = ("auto", "gloo", "nccl")
PRECISIONS = ("fp32", "fp64", "bf16", "fp16")
START_METHODS = ("spawn", "forkserver", "fork")
BATCH_KEYS = ("per_worker", "global")
OPTIMIZER_IMPLEMENTATIONS = ("auto", "for_loop", "foreach", "fused")


@dataclass
class TrainConfig:
    epochs: int = field(default=II("workload.epochs"), metadata={"ge": 1})
    """Epochs of training (default: the workload's reference recipe)."""
    evals_per_epoch: int = field(default=1, metadata={"ge": 1})
    """Evaluations on the full test set per epoch."""
    eval_at_start: bool = True
    """Also evaluate the initial model (epoch 0)."""
    check_every: int = field(default=10, metadata={"ge": 1})
    """Steps between divergence checks (no collective where every rank holds the same
    parameters; the training loss is summed across ranks at evaluations)."""
    stop_at_target: bool = False
    """End the run once it reaches workload.target_acc (the steps-to-target protocol of Shallue
    et al. 2018); the epochs are then its budget."""
    target_evals: int = field(default=1, metadata={"ge": 1})
    """Evaluations whose median accuracy must reach the target (a moving median, counted at the
    window's middle evaluation; 1: the first evaluation that reaches it)."""
    max_steps: int | None = field(default=None, metadata={"ge": 1})
    """Stop after this many steps (smoke tests, benchmarks); null: all epochs."""
    save_params: bool = False
    """Write the final parameters to params.npz (equivalence checks)."""


@dataclass
class OptimizerConfig:
    name: str = field(default="sgd", metadata={"choices": ("sgd",)})
    """Momentum SGD (the `lars` rule swaps in LARS)."""
    momentum: float = field(default=0.9, metadata={"ge": 0, "lt": 1})
    """Momentum factor."""
    weight_decay: float = field(default=II("workload.weight_decay"), metadata={"ge": 0})
    """L2 weight decay (default: the workload's recipe)."""
    nesterov: bool = False
    """Nesterov momentum."""
    implementation: str = field(default="auto", metadata={"choices": OPTIMIZER_IMPLEMENTATIONS})
    """SGD's kernels: auto (PyTorch's choice: foreach on GPUs), for_loop, foreach (one kernel
    per step for all tensors) or fused (one fused kernel; GPUs and recent CPUs)."""


@dataclass
class StepConfig:
    """How the training step runs on the device: options GPU benchmarks use (the model and
    the arithmetic are the same, only the speed differs)."""

    channels_last: bool = False
    """Convolutional models: weights and images in NHWC memory order (Tensor Core friendly)."""
    compile: bool = False
    """torch.compile the model before DDP wraps it (DDP's optimizer splits the graph at its
    buckets); the first steps compile, so raise timing.warmup_steps to keep them out."""


@dataclass
class ScheduleConfig:
    name: str = field(default="cosine", metadata={"choices": SCHEDULES})
    """LR after warmup: cosine to zero, step, constant, or poly (LARS's decay)."""
    milestones: list[float] = field(
        default_factory=lambda: [0.5, 0.75], metadata={"gt": 0, "lt": 1}
    )
    """Step schedule: where the LR drops, as fractions of the post-warmup phase (each in
    (0, 1))."""
    gamma: float = field(default=0.1, metadata={"gt": 0})
    """Step schedule: factor at each milestone."""
    power: float = field(default=2.0, metadata={"gt": 0})
    """Poly schedule: (1 - progress) ** power."""


@dataclass
class DDPConfig:
    bucket_cap_mb: float = field(default=25.0, metadata={"gt": 0})
    """DDP gradient bucket size (MB): each bucket's all-reduce overlaps the rest of backward."""
    timeout_s: float = field(default=60.0, metadata={"gt": 0})
    """Process-group timeout: a dead or frozen peer cannot hang a run for longer."""
    start_method: str = field(default="forkserver", metadata={"choices": START_METHODS})
    """How local worker processes are started (torch.multiprocessing): forkserver forks them
    from a process that imported torch once (fast starts over a sweep); spawn starts each from
    scratch."""


@dataclass
class DataConfig:
    load_timeout_s: float = field(default=600.0, metadata={"gt": 0})
    """Seconds the workload's load_data (generating or reading its data) may take, on each rank
    and in the launcher, before the run fails: a workload that never returns cannot hang it."""
    # The DataLoader of a workload whose data are Datasets (in-memory tensors need none).
    loader_workers: int = field(default=0, metadata={"ge": 0})
    """DataLoader worker processes per rank (0: the rank reads its samples itself). Forked from
    the rank: they start in milliseconds."""
    pin_memory: bool = True
    """Page-locked host batches, copied to a GPU without waiting (ignored on a CPU run)."""
    persistent_workers: bool = True
    """Keep the loader's workers between epochs and evaluations instead of starting them anew
    (the eval and test splits' are then forked as the run sets up, before any all-reduce)."""
    prefetch_factor: int = field(default=2, metadata={"ge": 1})
    """Batches each loader worker prepares ahead."""
    timeout_s: float = field(default=300.0, metadata={"gt": 0})
    """Seconds a loader worker may take for one batch before the run fails (with workers)."""


@dataclass
class TimingConfig:
    warmup_steps: int = field(default=5, metadata={"ge": 0})
    """Steps excluded from timing at the start of a run (and of the calibration)."""
    calibration_steps: int = field(default=10, metadata={"ge": 0})
    """Steps timed without gradient sync before training (-> exposed_comm_s); 0: off. All
    state is restored afterwards: the training is unchanged."""
    comm_every: int = field(default=10, metadata={"ge": 1})
    """Read DDP's own communication timers on every comm_every-th step (comm_time_s)."""
    comm_hook: bool = False
    """Time every bucket's all-reduce on every step in a Python DDP comm hook instead: exact
    per-step busy time and tail, at the cost of a Python call per bucket."""
    max_recorded_steps: int = field(default=2000, metadata={"ge": 1})
    """steps.csv keeps at most this many rows (evenly sampled)."""
    max_rank_steps: int = field(default=200, metadata={"ge": 0})
    """steps_by_rank.csv keeps each rank's own times of at most this many timed steps (evenly
    sampled; runs with more than one rank; 0: not written)."""


@dataclass
class ProfileConfig:
    steps: int = field(default=0, metadata={"ge": 0})
    """Record torch.profiler for this many steps on every rank (0: off): one Chrome/Perfetto
    trace per rank in <run dir>/profile/, TensorBoard-readable."""
    start: int | None = field(default=None, metadata={"ge": 0})
    """The first profiled step (0-based); null: the first step after timing.warmup_steps."""


@dataclass
class NoiseScaleConfig:
    enabled: bool = True
    """Measure the gradient noise scale B_simple (McCandlish et al. 2018); the training is
    the same with it on or off."""
    every: int = field(default=50, metadata={"ge": 1})
    """Measure on every every-th step."""
    window_steps: int = field(default=100, metadata={"ge": 1})
    """Training steps pooled into one value: B_simple = sum tr(Sigma) / sum |G|^2 over them
    (the ratio of single-step estimates is biased)."""
    split_single: bool = False
    """One worker: measure from the two halves of its batch (off by default: it would slow the
    1-worker baseline of a scaling sweep)."""


@dataclass
class HardwareConfig:
    tag: str | None = None
    """Your name for this machine (`dpsuite compare` groups by it)."""
    peak_tflops: float | None = field(default=None, metadata={"gt": 0})
    """The accelerator's peak TFLOP/s at the run's precision (989 for an H100/H200 SXM in
    bf16, dense): run.json then has mfu."""


@dataclass
class ChecksConfig:
    memory: bool = True
    """Refuse a run whose estimated memory (model, gradients, optimizer state, activations,
    data, per rank on this host) exceeds the host's available memory; false: start it anyway."""


@dataclass
class RunConfig:
    """One run of dpsuite: `dpsuite run KEY=VALUE ...`."""

    workload: Any = MISSING
    """The model and data (config group; `dpsuite run --help` lists the workloads)."""
    lr_rule: Any = MISSING
    """How the LR scales with the global batch (config group; `--help` lists the rules)."""
    sync: Any = MISSING
    """How the replicas agree (config group; `--help` lists the strategies)."""
    workers: int = field(default=1, metadata={"ge": 1})
    """Data-parallel ranks (processes), or virtual workers in simulated mode."""
    mode: str = field(default="ddp", metadata={"choices": MODES})
    """ddp: real processes + DistributedDataParallel; simulated: N workers in one process."""
    batch: dict[str, int | None] = field(default_factory=lambda: {"per_worker": 32, "global": None})
    """batch.per_worker: samples per worker per step; batch.global: the global batch instead
    (per_worker = global / workers)."""
    seed: int = field(default=0, metadata={"ge": 0, "le": 2**32 - 1})
    """Seed of the model's initialisation and the data order (the generators' range)."""
    repeat: int = field(default=0, metadata={"ge": 0})
    """Index of a repeated measurement of the same config (part of the run id)."""
    train: TrainConfig = field(default_factory=TrainConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    step: StepConfig = field(default_factory=StepConfig)
    """How the step runs on the device: channels_last, torch.compile."""
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    precision: str = field(default="fp32", metadata={"choices": PRECISIONS})
    """fp32, fp64, bf16 (autocast) or fp16 (autocast + loss scaling; CUDA only)."""
    device: str = field(default="auto", metadata={"choices": DEVICES})
    """auto (cuda if there is one), cpu or cuda."""
    backend: str = field(default="auto", metadata={"choices": BACKENDS})
    """auto (nccl on CUDA, else gloo), gloo or nccl."""
    threads_per_worker: int | None = field(default=None, metadata={"ge": 1})
    """Compute threads per worker; null: usable cores / local workers, at least 1."""
    ddp: DDPConfig = field(default_factory=DDPConfig)
    data: DataConfig = field(default_factory=DataConfig)
    """How the workload's data is loaded."""
    timing: TimingConfig = field(default_factory=TimingConfig)
    noise_scale: NoiseScaleConfig = field(default_factory=NoiseScaleConfig)
    profile: ProfileConfig = field(default_factory=ProfileConfig)
    """torch.profiler traces of a few steady-state steps (off by default)."""
    results_dir: str = "results"
    """Where run directories go (one per run id)."""
    cache_dir: str = "${oc.env:DPSUITE_CACHE_DIR,'~/.cache/dpsuite'}"
    """Generated datasets (DPSUITE_CACHE_DIR overrides)."""
    force: bool = False
    """Run again even when a complete result exists (the old result is kept until the new
    attempt ends)."""
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    checks: ChecksConfig = field(default_factory=ChecksConfig)
    """Checks made before a run starts."""
    sweep: Any = None
    """Set by a sweep preset that runs other presets in turn (`dpsuite sweep demo`)."""


SCHEMA_NAME = "dpsuite_schema"
_stored: set[tuple[str | None, str]] = set()  # (group, name) put into Hydra's ConfigStore


def register(workload: str | None = None, listed: bool = False) -> None:
    """Put the schema and the config groups' options into Hydra's ConfigStore (idempotent:
    each is stored once per process).

    ``workload``: the chosen workload (a comma list in a sweep), checked first: a plugin or an
    import path is added to the group, a broken one is a UserError naming it. The workload
    group holds the built-ins and the chosen ones; ``listed`` adds every installed plugin
    (shell completion), each imported.
    """
    from dpsuite import sync
    from dpsuite.optim import lr_rules

    _store(None, SCHEMA_NAME, RunConfig)
    for name, config in workload_configs(workload, listed).items():
        # A plugin's config is named as it was chosen, whatever its class calls itself.
        _store("workload", name, config(name=name))
    for name, rule in lr_rules.RULES.items():
        _store("lr_rule", name, rule.config)
    for name, config in sync.CONFIGS.items():
        _store("sync", name, config(name=name))


def _store(group: str | None, name: str, node: Any) -> None:
    if (group, name) not in _stored:
        ConfigStore.instance().store(group=group, name=name, node=node)
        _stored.add((group, name))


def group_choices(group: str) -> list[str]:
    """The options of a config group, from the registries that own them (every installed
    workload plugin that loads is imported to be listed)."""
    from dpsuite import sync
    from dpsuite.optim import lr_rules

    owners: dict[str, Any] = {
        "workload": workload_configs(listed=True),
        "lr_rule": lr_rules.RULES,
        "sync": sync.CONFIGS,
    }
    return sorted(owners[group])


# A choice that is not one name (Hydra's glob(*), a choice(...) sweep) needs the whole group.
_NOT_A_NAME = re.compile(r"[()*\[\]{}]")


def workload_configs(chosen: str | None = None, listed: bool = False) -> dict[str, Any]:
    """The built-in workloads' configs (no torch), plus each ``chosen`` plugin's or import
    path's, plus with ``listed`` every installed plugin's; UserError when a chosen plugin
    cannot be used. Only the plugins needed are imported: a built-in run imports none."""
    from dpsuite import workloads

    names = chosen.split(",") if chosen else []
    try:
        found = workloads.chosen_configs(names)
    except workloads.PluginError as exc:
        raise UserError(str(exc)) from None
    if listed or any(_NOT_A_NAME.search(n) for n in names):
        found = {**workloads.configs(), **found}
    return found
