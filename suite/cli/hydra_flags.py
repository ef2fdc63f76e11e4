"""Hydra's own command-line flags on `dpsuite run`: checked like everything else, or refused.

Hydra's flags would otherwise take a side door around dpsuite's checks and its results lock
(``-cd DIR workers=0`` ran a job that printed an error and exited 0). The flags that only show
the config (``--cfg``, ``--resolve``, ``--package``) run the same checks as a run first and then
print what Hydra would; the flags that change where the config comes from or what Hydra does
(``-cd``, ``-cp``, ``-cn``, ``--info``, ``-sc``, ``--experimental-rerun``, ...) are refused in one
line: dpsuite's config is its schema and its presets.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from omegaconf import OmegaConf

from dpsuite.errors import UserError

MULTIRUN = ("-m", "--multirun")
SHOW_WITH_VALUE = {"--cfg": "what", "-c": "what", "--package": "package", "-p": "package"}
SHOW = ("job", "hydra", "all")


@dataclass
class ShowRequest:
    """`--cfg WHAT [--resolve] [--package P]`: print the composed config, checked first."""

    what: str | None = None
    resolve: bool = False
    package: str | None = None
    overrides: list[str] = field(default_factory=list)
    multirun: bool = False


def requested(args: list[str]) -> bool:
    """``args`` ask to see the config (``--cfg``, ``--resolve``, ``--package``)."""
    return any(a.partition("=")[0] in SHOW_WITH_VALUE or a == "--resolve" for a in args)


def parse(args: list[str]) -> ShowRequest | None:
    """The show request in ``args``, None when there is no Hydra flag; UserError for a flag
    dpsuite does not take."""
    request, rest, i = ShowRequest(), [], 0
    flagged = False
    while i < len(args):
        arg = args[i]
        name, eq, value = arg.partition("=")
        if arg in MULTIRUN:
            request.multirun = True
        elif name in SHOW_WITH_VALUE:
            flagged = True
            if not eq:
                i += 1
                value = args[i] if i < len(args) else ""
            setattr(request, SHOW_WITH_VALUE[name], value)
        elif arg == "--resolve":
            flagged = request.resolve = True
        elif arg.startswith("-"):
            raise UserError(
                f"run: Hydra's option {name} is not supported: dpsuite's config comes from its "
                "schema and presets; set keys as KEY=VALUE, choose a preset with `dpsuite sweep "
                "NAME`, and see the composed config with `dpsuite run --cfg job KEY=VALUE ...`"
            )
        else:
            rest.append(arg)
        i += 1
    if not flagged:
        return None
    if request.what not in SHOW:
        got = request.what or "nothing"
        raise UserError(f"run: --cfg takes one of {', '.join(SHOW)}, got {got}")
    request.overrides = rest
    return request


def show(request: ShowRequest) -> str:
    """Check every run the overrides describe (nothing is created), then the config as YAML."""
    from dpsuite.conf import compose

    compose.plan(request.overrides, multirun=request.multirun, writing=False)
    return _yaml(request)


def show_preset(name: str, request: ShowRequest) -> str:
    """`dpsuite sweep NAME --cfg job`: every part of the preset checked, then each config."""
    from dpsuite.sweep import runner

    sweeps = runner.planned(name, request.overrides, writing=False)
    shown = []
    for sweep in sweeps:
        request.overrides = [f"+{runner.PRESET_GROUP}={sweep.preset}", *sweep.overrides]
        text = _yaml(request)
        shown.append(text if len(sweeps) == 1 else f"# part {sweep.preset}\n{text}")
    return "\n".join(shown)


def _yaml(request: ShowRequest) -> str:
    from dpsuite.conf import compose

    base = [o for o in request.overrides if not compose.is_sweep(o)]
    cfg = compose.compose_config(base, with_hydra=request.what != "job")
    if request.what == "job":
        cfg.pop("hydra", None) if "hydra" in cfg else None
    elif request.what == "hydra":
        cfg = OmegaConf.create({"hydra": cfg.hydra})
    if request.package:
        node = OmegaConf.select(cfg, request.package)
        if node is None:
            raise UserError(f"run: --package {request.package}: no such key in the config")
        cfg = node if OmegaConf.is_config(node) else OmegaConf.create({request.package: node})
    return OmegaConf.to_yaml(cfg, resolve=request.resolve).rstrip("\n")
