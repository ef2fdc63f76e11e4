"""The few parts of Hydra that are not its public API, in one place.

dpsuite uses Hydra's own sweep expansion, override application and bash completion rather than
copies of them; they live in ``hydra._internal``, so a Hydra release that moves them breaks only
this module. The same goes for telling Hydra's plugin registry about dpsuite's launcher.
"""

from __future__ import annotations

from typing import Any

from hydra.core.override_parser.types import Override
from omegaconf import DictConfig


def split_sweep(parsed: list[Override]) -> list[list[str]]:
    """Every point of a sweep, as Hydra's basic sweeper expands it (HydraException if bad)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    return BasicSweeper.split_arguments(parsed, max_batch_size=None)[0]


def apply_overrides(overrides: list[Override], cfg: DictConfig) -> None:
    """Set ``overrides``' values on a composed ``cfg`` in place, as Hydra's compose would."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    ConfigLoaderImpl._apply_overrides_to_config(overrides, cfg)


def bash_completion(config_loader: Any = None) -> Any:
    """Hydra's bash completion plugin (``config_loader`` None: only install/uninstall work)."""
    from hydra._internal.core_plugins.bash_completion import BashCompletion

    return BashCompletion(config_loader)


def make_plugin_known(target: str, plugin: type) -> None:
    """Let Hydra instantiate ``plugin`` as ``target`` even when its scan missed it.

    Hydra finds plugins by walking the ``hydra_plugins`` namespace package with ``pkgutil``,
    which cannot walk the part of it that an editable install (PEP 660) maps onto a source
    folder: with ``pip install -e .`` dpsuite's launcher imports fine but is not in Hydra's list.
    """
    from hydra.core.plugins import Plugins

    Plugins.instance().class_name_to_class.setdefault(target, plugin)
