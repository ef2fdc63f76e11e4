"""Workloads from other packages: entry points and dotted paths, checked before they are used.

An installed package offers workloads in the entry-point group ``dpsuite.workloads`` (the name
users type -> ``module:Class``). The names are read from the packages' metadata without
importing anything; a plugin's module is imported only when that plugin is chosen, or when the
workloads are listed (``dpsuite run --help``), so a run of a built-in workload imports no
plugin at all. A one-off needs no packaging: ``workload=mypkg.models:MyWorkload`` names the
class by its import path.

Either way the class must be a ``dpsuite.workloads.Workload`` subclass with every abstract method,
and its ``Config`` a dataclass subclass of ``WorkloadConfig`` whose defaults Hydra can hold. The
import runs contained (``dpsuite.workloads.contained``): whatever it does (raise, ``sys.exit``,
``KeyboardInterrupt``, block past ``DPSUITE_PLUGIN_IMPORT_TIMEOUT_S``) the plugin becomes a
``PluginError`` naming it, raised only when that plugin is chosen. A name that shadows a built-in
or cannot be a config group option is not offered. One broken package never stops the
built-ins or other plugins.
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
from dataclasses import dataclass, field, is_dataclass
from functools import cache
from importlib.metadata import entry_points
from typing import TYPE_CHECKING

from dpsuite.workloads.configs import CONFIGS
from dpsuite.workloads.configs.base import WorkloadConfig
from dpsuite.workloads.contained import Escaped, call_contained

if TYPE_CHECKING:
    from dpsuite.workloads.base import Workload

ENTRY_POINT_GROUP = "dpsuite.workloads"
# What Hydra takes as a config group option and a run id can hold: no path separators, no
# spaces or other characters a shell or a file system reads differently.
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
IMPORT_LIMIT_ENV = "DPSUITE_PLUGIN_IMPORT_TIMEOUT_S"
IMPORT_LIMIT_S = 60.0  # a plugin's own import, torch already imported
# dpsuite's import names before it had only one: a plugin written against them is told the new.
OLD_IMPORT_NAMES = {"suite": "dpsuite", "workloads": "dpsuite.workloads"}


class PluginError(ValueError):
    """A workload plugin that cannot be used; the message names it and says why."""


@dataclass(frozen=True)
class Plugin:
    """One workload offered by an installed package, loaded or with the reason it is not."""

    name: str
    target: str  # module:Class
    workload: type[Workload] | None = None
    error: str | None = None

    def load(self) -> type[Workload]:
        if self.workload is None:
            raise PluginError(f"workload plugin '{self.name}' ({self.target}): {self.error}")
        return self.workload


def is_path(name: str) -> bool:
    """``mypkg.models:MyWorkload`` names a class by its import path; plain names do not."""
    return ":" in name


def import_target(target: str) -> object:
    """The object ``module:attr`` (``attr`` may be dotted) names; ImportError/AttributeError."""
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise ImportError(f"'{target}' is not of the form module:Class")
    obj: object = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def problem(obj: object) -> str | None:
    """Why ``obj`` cannot be used as a workload class, or None when it can."""
    from dpsuite.workloads.base import Workload  # torch, as the plugin itself

    if not (inspect.isclass(obj) and issubclass(obj, Workload)):
        return f"{obj!r} is not a subclass of dpsuite.workloads.Workload"
    if inspect.isabstract(obj):
        missing = ", ".join(sorted(obj.__abstractmethods__))
        return f"{obj.__name__} does not implement {missing}"
    config = getattr(obj, "Config", None)
    is_config = inspect.isclass(config) and is_dataclass(config)
    if not (is_config and issubclass(config, WorkloadConfig)):
        return (
            f"{obj.__name__}.Config is not a dataclass subclass of dpsuite.workloads.WorkloadConfig"
        )
    return config_problem(config)


def config_problem(config: type[WorkloadConfig]) -> str | None:
    """Why Hydra could not hold ``config``'s defaults (a field without a default, a type
    OmegaConf does not support), or None."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        OmegaConf.structured(config())
    except TypeError as exc:
        return f"{config.__name__} needs a default for every field ({exc})"
    except (OmegaConfBaseException, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"{config.__name__} cannot be a Hydra config: {first}"
    return None


def import_limit_s() -> float:
    """Seconds a plugin's import may take (``DPSUITE_PLUGIN_IMPORT_TIMEOUT_S``, default 60)."""
    try:
        limit = float(os.environ.get(IMPORT_LIMIT_ENV, IMPORT_LIMIT_S))
    except ValueError:
        return IMPORT_LIMIT_S
    return limit if limit > 0 else IMPORT_LIMIT_S


def _checked(target: str) -> type[Workload]:
    """The workload class at ``target``, imported and checked contained; ``_Broken`` says why
    it cannot be used."""
    import dpsuite.workloads.base  # noqa: F401  (torch: imported here, outside the time limit)

    limit = import_limit_s()
    try:
        obj = call_contained(lambda: import_target(target), limit, target)
    except Escaped as exc:
        if exc.cause is None:
            raise _Broken(
                f"cannot import it: its import did not finish within {limit:g} s "
                f"({IMPORT_LIMIT_ENV} sets the limit)"
            ) from None
        raise _Broken(f"cannot import it: {renamed_import(exc.cause) or exc}") from None
    try:  # its Config's defaults are made: the plugin's code again
        reason = call_contained(lambda: problem(obj), limit, target)
    except Escaped as exc:
        raise _Broken(f"cannot check it: {exc}") from None
    if reason:
        raise _Broken(reason)
    assert inspect.isclass(obj)
    return obj


def renamed_import(exc: BaseException) -> str | None:
    """For an import of dpsuite's old top-level names (``suite``, ``workloads``), the new one."""
    name = getattr(exc, "name", None) if isinstance(exc, ImportError) else None
    top, _, rest = (name or "").partition(".")
    if top not in OLD_IMPORT_NAMES:
        return None
    new = OLD_IMPORT_NAMES[top] + (f".{rest}" if rest else "")
    return f"it imports '{name}', which dpsuite now names '{new}' (from {new} import ...)"


class _Broken(Exception):
    """Internal: why a target is not a usable workload class."""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


@dataclass(frozen=True)
class Offers:
    """What the installed packages offer, read from their metadata (nothing imported)."""

    usable: dict[str, str] = field(default_factory=dict)  # name -> module:Class
    refused: dict[str, str] = field(default_factory=dict)  # name -> one line: why not offered


@cache
def offered() -> Offers:
    """The entry points of the group, by name: the first installed distribution wins, as for
    console scripts; a name that shadows a built-in or is no usable option is refused."""
    offers = Offers()
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in offers.usable or ep.name in offers.refused:
            continue
        why = name_problem(ep.name)
        if why:
            offers.refused[ep.name] = f"workload plugin {ep.name!r} ({ep.value}) is ignored: {why}"
        else:
            offers.usable[ep.name] = ep.value
    return offers


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a plugin's workload name, or None."""
    if name in CONFIGS:
        return "it shadows the built-in workload of that name"
    if not NAME.fullmatch(name):
        return "a workload name is ASCII letters, digits and _ . - (not starting with . or -)"
    return None


@cache
def load(name: str) -> Plugin:
    """The offered plugin ``name``, its module imported (contained) and its class checked."""
    target = offered().usable[name]
    try:
        return Plugin(name, target, workload=_checked(target))
    except _Broken as exc:
        return Plugin(name, target, error=str(exc))


def discovered() -> dict[str, Plugin]:
    """Every offered plugin, loaded: each one's module is imported (to list them)."""
    return {name: load(name) for name in offered().usable}


@cache
def load_path(path: str) -> type[Workload]:
    """The workload class a dotted path names (``mypkg.models:MyWorkload``); PluginError."""
    try:
        return _checked(path)
    except _Broken as exc:
        raise PluginError(f"workload '{path}': {exc}") from None
