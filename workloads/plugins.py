"""Workloads from other packages: entry points and dotted paths, checked before they are used.

An installed package offers workloads in the entry-point group ``dpsuite.workloads`` (the name
users type -> ``module:Class``); they are read once per process. A one-off needs no packaging:
``workload=mypkg.models:MyWorkload`` names the class by its import path.

Either way the class must be a ``dpsuite.workloads.Workload`` subclass with every abstract method,
and
its ``Config`` a dataclass subclass of ``WorkloadConfig`` whose defaults Hydra can hold. A plugin
that fails (its import, its base class, its config) becomes a ``PluginError`` naming it, raised
only when that plugin is chosen: one broken package never stops the built-ins or other plugins.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass, is_dataclass
from functools import cache
from importlib.metadata import entry_points
from typing import TYPE_CHECKING

from dpsuite.workloads.configs.base import WorkloadConfig

if TYPE_CHECKING:
    from dpsuite.workloads.base import Workload

ENTRY_POINT_GROUP = "dpsuite.workloads"
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


def _checked(target: str) -> type[Workload]:
    """The workload class at ``target``; ``_Broken`` says why it cannot be used."""
    try:
        obj = import_target(target)
    except Exception as exc:  # a plugin's import may fail in any way; it must not stop ours
        reason = renamed_import(exc) or f"{type(exc).__name__}: {_first_line(exc)}"
        raise _Broken(f"cannot import it: {reason}") from None
    reason = problem(obj)
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


@cache
def discovered() -> dict[str, Plugin]:
    """Every workload the installed packages offer, by name (read once per process)."""
    found: dict[str, Plugin] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in found:
            continue  # the first installed distribution wins, as for console scripts
        try:
            found[ep.name] = Plugin(ep.name, ep.value, workload=_checked(ep.value))
        except _Broken as exc:
            found[ep.name] = Plugin(ep.name, ep.value, error=str(exc))
    return found


@cache
def load_path(path: str) -> type[Workload]:
    """The workload class a dotted path names (``mypkg.models:MyWorkload``); PluginError."""
    try:
        return _checked(path)
    except _Broken as exc:
        raise PluginError(f"workload '{path}': {exc}") from None
