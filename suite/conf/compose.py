"""Compose and check configs before any work starts, including every point of a sweep.

A sweep's points are expanded exactly as Hydra's basic sweeper will expand them: the
``hydra.sweeper.params`` of the composed config (a preset's grid) first, then the command line's
overrides, which replace a preset's axis of the same name.
"""

from __future__ import annotations

import copy
import math
import os
from dataclasses import dataclass, field

from hydra import compose, initialize_config_module
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, RangeSweep
from hydra.errors import HydraException, MissingConfigException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, OmegaConfBaseException, ValidationError

from dpsuite.conf import hydra_internals, schema
from dpsuite.errors import UserError, did_you_mean

CONFIG_MODULE = "dpsuite.conf"
GROUPS = ("workload", "lr_rule", "sweep", "sync")
MAX_CHECKED_POINTS = 4096


def group_choices(group: str) -> list[str]:
    """A config group's options: sweep presets are YAML files, the rest come from registries."""
    if group == "sweep":
        from importlib import resources

        files = resources.files(CONFIG_MODULE).joinpath(group).iterdir()
        return sorted(f.name[:-5] for f in files if f.name.endswith(".yaml"))
    return schema.group_choices(group)


def preset_names() -> list[str]:
    """The sweep presets (files starting with _ are shared pieces that presets include)."""
    return [n for n in group_choices("sweep") if not n.startswith("_")]


def compose_config(overrides: list[str], with_hydra: bool = False) -> DictConfig:
    """The composed config for ``overrides``; bad overrides raise UserError with one line."""
    schema.register(_choice(overrides, "workload"))
    try:
        with initialize_config_module(config_module=CONFIG_MODULE, version_base=None):
            return compose(
                config_name="config", overrides=list(overrides), return_hydra_config=with_hydra
            )
    except MissingConfigException as exc:
        for group in GROUPS:
            chosen = _choice(overrides, group)
            choices = group_choices(group)
            # A workload named by its import path is no option of the group, yet was found
            # (registering it would have said otherwise): the unknown choice is another group's.
            by_path = group == "workload" and chosen is not None and ":" in chosen
            if chosen is not None and chosen not in choices and not by_path:
                known = model_hint(chosen) if group == "workload" else None
                raise UserError(
                    f"unknown {group} '{chosen}'{did_you_mean(chosen, choices, known=known)} "
                    f"(choose from: {', '.join(choices)})"
                ) from None
        raise UserError(_first_line(exc)) from None
    except (HydraException, OmegaConfBaseException, ValueError) as exc:
        raise UserError(_override_error(exc, overrides)) from None


def model_hint(word: str) -> dict[str, str]:
    """``{word: the workload and key that build it}`` when ``word`` names a model of a built-in
    workload (resnet18: ``workload=torchvision workload.arch=resnet18``; gpt2-medium:
    ``workload=gpt2 workload.size=355M``), else ``{}``. Case, '-', '_' and '.' aside."""
    from dpsuite.workloads.configs import gpt2, vision

    def squashed(name: str) -> str:
        return "".join(c for c in name.lower() if c not in "-_.")

    wanted = squashed(word)
    for name, size in gpt2.SIZE_NAMES.items():
        if squashed(name) == wanted:
            return {word: f"workload=gpt2 workload.size={size}"}
    for arch in vision.known_architectures():
        if squashed(arch) == wanted:
            return {word: f"workload=torchvision workload.arch={arch}"}
    return {}


def _override_error(exc: BaseException, overrides: list[str]) -> str:
    """One line for an override Hydra could not apply: an unknown key, or a value of the
    wrong type for its key."""
    cause = exc.__cause__
    key = getattr(cause, "full_key", None)
    if isinstance(cause, ConfigAttributeError) and key:
        rest = [o for o in overrides if o.lstrip("+~").split("=", 1)[0] != key]
        parent, _, leaf = str(key).rpartition(".")
        node = compose_config(rest).get(parent) if parent else compose_config(rest)
        known = [str(k) for k in node] if isinstance(node, DictConfig) else []
        hint = did_you_mean(leaf, known)
        where = f"{parent} has: {', '.join(known)}" if parent else "see `dpsuite run --help`"
        return f"unknown config key '{key}'{hint}; {where}"
    if isinstance(cause, ValidationError) and key:
        value = next(
            (o.split("=", 1)[1] for o in overrides if o.lstrip("+").split("=", 1)[0] == key), "?"
        )
        text = str(cause)
        for marker, wanted in TYPE_WORDS.items():
            if marker in text:
                return f"{key} must be {wanted}, got {value}"
        return f"{key}={value}: {_first_line(cause)}"
    return _first_line(exc)


# How OmegaConf's validation messages name a type, and how we say it.
TYPE_WORDS = {
    "converted to Integer": "an integer",
    "is not a valid bool": "true or false",
    "converted to Float": "a number",
}


def _choice(overrides: list[str], group: str) -> str | None:
    for o in overrides:
        key, _, value = o.lstrip("+~").partition("=")
        if key == group:
            return value.replace("\\", "")  # a sweep point escapes ':' in an import path
    return None


def _first_line(exc: BaseException) -> str:
    """The first line of the first non-empty message along the exception's cause chain."""
    cur: BaseException | None = exc
    while cur is not None:
        text = str(cur).strip()
        if text:
            return text.splitlines()[0]
        cur = cur.__cause__ or cur.__context__
    return type(exc).__name__


def is_hydra_override(override: str) -> bool:
    """``hydra.*`` and ``hydra/*`` overrides configure Hydra itself and are never swept."""
    key = override.lstrip("+~").split("=", 1)[0]
    return key == "hydra" or key.startswith(("hydra.", "hydra/"))


def _parse(overrides: list[str]):
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException as exc:
        raise UserError(_first_line(exc)) from None
    for override in parsed:
        _check_shape(override)
    return parsed


def _check_shape(override) -> None:
    """Refuse overrides Hydra would accept but dpsuite cannot mean: deleting a key, a list or
    mapping (or nothing) as a config group's choice."""
    key = override.key_or_group
    if key == "hydra" or key.startswith(("hydra.", "hydra/")):
        return
    if override.is_delete():
        raise UserError(f"~{key}: dpsuite's config keys cannot be deleted; set {key}=VALUE instead")
    if key in GROUPS and not override.is_sweep_override():
        value = override.value()
        if not isinstance(value, str):
            choices = ", ".join(group_choices(key))
            shown = override.input_line.split("=", 1)[-1]
            raise UserError(
                f"{key}={shown}: {key} takes one name (choose from: {choices}); "
                f"to run several, sweep them: dpsuite run -m {key}=A,B"
            )


def sweep_points(overrides: list[str], params: dict[str, str] | None = None) -> list[list[str]]:
    """Every job a basic multirun runs: ``params`` (the config's grid), then ``overrides``.
    The runs are counted before they are listed: a sweep too large to check is refused, and
    so is one with no run at all."""
    grid = [f"{k}={v}" for k, v in (params or {}).items()]
    task = [o for o in overrides if not is_hydra_override(o)]
    parsed = _parse(grid + task)
    count = sweep_size(parsed)
    if count > MAX_CHECKED_POINTS:
        raise UserError(f"the sweep has {count} runs; at most {MAX_CHECKED_POINTS} per sweep")
    try:
        points = hydra_internals.split_sweep(parsed)
    except HydraException as exc:
        raise UserError(_first_line(exc)) from None
    if not points:
        raise UserError("the sweep has no runs: an axis has no values (e.g. range(1,1))")
    return points


def sweep_size(parsed) -> int:
    """How many runs a sweep's overrides make, without making them (a later axis of the same
    key replaces an earlier one, as a command-line axis replaces a preset's)."""
    sizes: dict[str, int] = {}
    for override in parsed:
        value = override.value() if override.is_sweep_override() else None
        if isinstance(value, RangeSweep):
            start, stop, step = value.start, value.stop, value.step
            sizes[override.key_or_group] = max(0, math.ceil((stop - start) / step)) if step else 0
        elif isinstance(value, ChoiceSweep):
            sizes[override.key_or_group] = len(value.list)
        else:  # a single value, or a glob over a group's few choices
            sizes[override.key_or_group] = 1
    return math.prod(sizes.values())


SLURM_LAUNCHER = "hydra_plugins.dpsuite_slurm_launcher.SlurmLauncher"


@dataclass(frozen=True)
class LauncherShape:
    """Where the runs start: this process (basic launcher) or submitit jobs of N tasks."""

    target: str
    tasks: int = 1
    tasks_per_node: int = 1
    params: dict = field(default_factory=dict)  # the launcher's resolved keys (submitit's)

    @property
    def remote(self) -> bool:
        """The runs start in other processes, maybe on other machines (submitit)."""
        return "submitit" in self.target or self.slurm

    @property
    def slurm(self) -> bool:
        """dpsuite's SLURM launcher (`hydra/launcher=slurm`)."""
        return self.target == SLURM_LAUNCHER


def launcher_shape(cfg: DictConfig) -> LauncherShape:
    launcher = cfg.hydra.launcher
    target = str(launcher.get("_target_", ""))
    if "submitit" not in target and target != SLURM_LAUNCHER:
        return LauncherShape(target)
    if target == SLURM_LAUNCHER:
        import hydra_plugins.dpsuite_slurm_launcher as plugin

        if not plugin.slurm_available():
            raise UserError(
                "hydra/launcher=slurm needs hydra-submitit-launcher: pip install "
                "'dpsuite[slurm]' (in a clone: pip install -e '.[slurm]')"
            )
        hydra_internals.make_plugin_known(SLURM_LAUNCHER, plugin.SlurmLauncher)
    try:
        params = OmegaConf.to_container(launcher, resolve=True)
    except OmegaConfBaseException as exc:
        raise UserError(f"hydra.launcher: {_first_line(exc)}") from None
    assert isinstance(params, dict)
    params.pop("_target_", None)
    nodes = _launcher_count(params, "nodes")
    per_node = _launcher_count(params, "tasks_per_node")
    return LauncherShape(target, nodes * per_node, per_node, params)


def _launcher_count(params: dict, key: str) -> int:
    value = params.get(key)
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserError(f"hydra.launcher.{key} must be an integer >= 1, got {value!r}")
    return value


@dataclass
class Plan:
    """What a command will run: the resolved spec of every job, in order."""

    specs: list = field(default_factory=list)  # list[RunSpec]
    launcher: LauncherShape = field(default_factory=lambda: LauncherShape("basic"))
    grid: dict[str, str] = field(default_factory=dict)  # the axes that run (key -> "a,b")


def plan(overrides: list[str], multirun: bool, writing: bool = True) -> Plan:
    """Compose and resolve every run the command would start (raises UserError on bad input).
    ``writing=False`` (help, dry runs): the results directories are neither made nor checked."""
    from dpsuite.runtime.ranks import ranks_from_env

    overrides = list(overrides)
    base = [o for o in overrides if not is_sweep(o)]
    composed = compose_config(base, with_hydra=True)
    _reject_composite_preset(composed)
    shape = launcher_shape(composed)
    if shape.remote and not multirun:
        # Hydra would ignore the launcher and train right here (on a login node, say).
        raise UserError(
            "hydra/launcher submits the runs of a sweep: add -m (dpsuite run -m ...), "
            "or leave hydra/launcher out to run here"
        )
    params = composed.hydra.sweeper.get("params")
    grid = OmegaConf.to_container(params, resolve=False) if params else {}
    points = sweep_points(overrides, grid if multirun else None) if multirun else [overrides]
    if len(points) > MAX_CHECKED_POINTS:
        raise UserError(f"the sweep has {len(points)} runs; at most {MAX_CHECKED_POINTS} per sweep")
    _check_rank_environment()
    ranks = ranks_from_env()
    composer = PointComposer()
    specs = []
    for point in points:
        task = [o for o in point if not is_hydra_override(o)]
        specs.append(_resolve_point(composer.compose(task), shape, ranks, writing))
        _check_batch_spellings(task, specs[-1])
    return Plan(specs=specs, launcher=shape, grid=axes_that_run(points, grid) if multirun else {})


def axes_that_run(points: list[list[str]], params: dict) -> dict[str, str]:
    """The grid the points make: each axis of the config's grid (with the values the command
    line replaced it by) and each key that takes several values, with its values in order."""
    values: dict[str, list[str]] = {}
    for point in points:
        for override in point:
            key, _, value = override.partition("=")
            seen = values.setdefault(key.lstrip("+~"), [])
            if value not in seen:
                seen.append(value)
    axes = {str(k) for k in params} | {k for k, v in values.items() if len(v) > 1}
    return {k: ",".join(v) for k, v in values.items() if k in axes}


class PointComposer:
    """Composes the points of a sweep, each config group selection only once.

    Hydra composes a config in two stages: the defaults list (config group choices such as
    ``workload=...``) and then the value overrides applied to the result. Points of a sweep
    mostly differ in values, so the first stage is cached per group selection and the second
    is Hydra's own ``_apply_overrides_to_config``: the same config as a full compose, at a
    fraction of the cost (a sweep of 84 points is checked in well under a second).
    """

    def __init__(self) -> None:
        self.cache: dict[tuple[str, ...], DictConfig] = {}

    def compose(self, overrides: list[str]) -> DictConfig:
        parsed = _parse(overrides)
        groups = tuple(o.input_line for o in parsed if _selects_group(o))
        values = [o for o in parsed if not _selects_group(o)]
        if groups not in self.cache:
            self.cache[groups] = compose_config(list(groups))
        cfg = copy.deepcopy(self.cache[groups])
        try:
            hydra_internals.apply_overrides(values, cfg)
        except (HydraException, OmegaConfBaseException, ValueError):
            return compose_config(overrides)  # the full compose gives Hydra's own error message
        return cfg


def _selects_group(override) -> bool:
    """True for a config group choice (``workload=mnist1d_cnn``), False for a value override."""
    top = override.key_or_group.split("/")[0].split(".")[0]
    return top in GROUPS and "." not in override.key_or_group and not override.is_delete()


def is_sweep(override: str) -> bool:
    return any(o.is_sweep_override() for o in _parse([override]))


def _check_batch_spellings(task: list[str], spec) -> None:
    """batch.per_worker and batch.global both given must say the same thing (the global batch
    wins otherwise, and the per-worker batch the user asked for would silently not be used)."""
    given = {o.lstrip("+").split("=", 1)[0] for o in task}
    per_worker = spec.cfg.batch.get("per_worker")
    if {"batch.per_worker", "batch.global"} <= given and per_worker != spec.per_worker_batch:
        raise UserError(
            f"batch.per_worker={per_worker} and batch.global={spec.global_batch} contradict "
            f"each other at workers={spec.workers} ({per_worker} x {spec.workers} = "
            f"{per_worker * spec.workers}): give one of them"
        )


def _check_rank_environment() -> None:
    """RANK and WORLD_SIZE without a rendezvous address are left over from another job (an
    exported shell, a notebook), not set by torchrun: joining would wait for ranks that never
    come."""
    env = os.environ
    if (
        "RANK" in env
        and "WORLD_SIZE" in env
        and not ("MASTER_ADDR" in env and "MASTER_PORT" in env)
    ):
        raise UserError(
            f"RANK={env['RANK']} and WORLD_SIZE={env['WORLD_SIZE']} are set but MASTER_ADDR and "
            "MASTER_PORT are not: left over from another job? Unset them (torchrun sets all four)"
        )


def _reject_composite_preset(cfg: DictConfig) -> None:
    if "parts" in (cfg.get("sweep") or {}):
        raise UserError(
            "this sweep preset runs other presets in turn; start it with `dpsuite sweep NAME`"
        )


def _resolve_point(cfg: DictConfig, shape: LauncherShape, ranks, writing: bool = True):
    from dpsuite.conf.run_spec import resolve

    if ranks is not None:  # under torchrun/srun: the ranks exist already
        return resolve(
            cfg,
            world_size=ranks.world_size,
            local_world_size=ranks.local_world_size,
            check_results_dir=writing,
        )
    if shape.remote and shape.tasks > 1:
        # One task per rank: the job's tasks are the workers, whatever `workers` says, so a
        # mismatch would silently run something else than asked (and repeat run ids).
        if cfg.workers != shape.tasks:
            raise UserError(
                f"workers={cfg.workers} but the launcher starts {shape.tasks} tasks per job "
                "(hydra.launcher.nodes x tasks_per_node): one task per worker, so set "
                f"workers={shape.tasks}, or tasks_per_node=1 to start the workers inside one task"
            )
        return resolve(
            cfg,
            world_size=shape.tasks,
            local_world_size=shape.tasks_per_node,
            check_devices=False,
            check_results_dir=writing,
        )
    return resolve(cfg, check_devices=not shape.remote, check_results_dir=writing)


def check_overrides(overrides: list[str], multirun: bool) -> int:
    """Compose and resolve every run the command would start; returns how many were checked."""
    return len(plan(overrides, multirun).specs)
