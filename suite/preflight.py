"""Compose and check configs before any work starts, including every point of a sweep."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from hydra import compose, initialize_config_module
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, MissingConfigException
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from suite.errors import UserError

CONFIG_MODULE = "suite.conf"
GROUPS = ("workload", "lr_rule", "sync")
MAX_CHECKED_POINTS = 4096


def _group_choices(group: str) -> list[str]:
    from importlib import resources

    files = resources.files(CONFIG_MODULE).joinpath(group).iterdir()
    return sorted(f.name[:-5] for f in files if f.name.endswith(".yaml"))


def compose_config(overrides: list[str]) -> DictConfig:
    """The composed config for ``overrides``; bad overrides raise UserError with one line."""
    try:
        with initialize_config_module(config_module=CONFIG_MODULE, version_base=None):
            return compose(config_name="config", overrides=list(overrides))
    except MissingConfigException as exc:
        for group in GROUPS:
            chosen = _choice(overrides, group)
            if chosen is not None and chosen not in _group_choices(group):
                raise UserError(
                    f"unknown {group} '{chosen}' (choose from: {', '.join(_group_choices(group))})"
                ) from None
        raise UserError(_first_line(exc)) from None
    except (HydraException, OmegaConfBaseException, ValueError) as exc:
        line = _first_line(exc)
        if line.startswith("Could not override"):
            line += " There is no such config key (see `dpsuite run --cfg job`)."
        raise UserError(line) from None


def _choice(overrides: list[str], group: str) -> str | None:
    for o in overrides:
        key, _, value = o.lstrip("+~").partition("=")
        if key == group:
            return value
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


def sweep_points(overrides: list[str]) -> Iterator[list[str]]:
    """Every combination a basic multirun sweep would run (comma lists, range(), choice())."""
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException as exc:
        raise UserError(_first_line(exc)) from None
    axes: list[list[str]] = []
    for o in parsed:
        key = o.get_key_element()
        if o.is_sweep_override():
            axes.append([f"{key}={v}" for v in o.sweep_string_iterator()])
        else:
            axes.append([o.input_line])
    return (list(p) for p in itertools.product(*axes))


def check_overrides(overrides: list[str], multirun: bool) -> int:
    """Compose and resolve every run the command would start; returns how many were checked."""
    from suite.distributed import ranks_from_env
    from suite.run_spec import resolve

    ranks = ranks_from_env()
    world = ranks.world_size if ranks else None
    local = ranks.local_world_size if ranks else None
    points = sweep_points(overrides) if multirun else iter([overrides])
    checked = 0
    for point in itertools.islice(points, MAX_CHECKED_POINTS):
        resolve(compose_config(point), world_size=world, local_world_size=local)
        checked += 1
    return checked
