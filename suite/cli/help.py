"""Help texts: the config's keys with their defaults and meanings, the sweep presets, and what
a sweep would run (`--dry-run`)."""

from __future__ import annotations

import textwrap
from dataclasses import fields, is_dataclass
from importlib import resources
from typing import Any

from omegaconf import DictConfig, OmegaConf

from dpsuite.conf import compose
from dpsuite.conf.checks import field_docs

WIDTH = 100
GROUPS = ("workload", "lr_rule", "sync")


def version() -> str:
    import platform
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as package_version

    try:
        mine = package_version("dpsuite")
    except PackageNotFoundError:
        mine = "unknown"
    try:
        torch = package_version("torch")
    except PackageNotFoundError:
        torch = "not installed"
    return f"dpsuite {mine} (torch {torch}, python {platform.python_version()})"


def _value(node: DictConfig, key: str) -> str:
    raw = OmegaConf.to_container(node, resolve=False)[key]  # interpolations shown as written
    if raw is None:
        return "null"
    return str(raw).lower() if isinstance(raw, bool) else str(raw)


def _lines(node: DictConfig, prefix: str = "") -> list[str]:
    """One line per key (nested sections flattened to dotted keys), with its documentation."""
    schema = OmegaConf.get_type(node)
    docs = field_docs(schema) if is_dataclass(schema) else {}
    order = [f.name for f in fields(schema)] if is_dataclass(schema) else list(node)
    out = []
    for key in order:
        if key not in node or key in GROUPS or (not prefix and key == "sweep"):
            continue
        child = node._get_node(key)
        if isinstance(child, DictConfig) and is_dataclass(OmegaConf.get_type(child)):
            out += _lines(child, f"{prefix}{key}.")
            continue
        if isinstance(child, DictConfig):  # a plain mapping (batch): one line per key
            for i, sub in enumerate(child):
                doc = docs.get(key, "") if i == 0 else ""
                out.append(_entry(f"{prefix}{key}.{sub}={_value(child, sub)}", doc))
            continue
        out.append(_entry(f"{prefix}{key}={_value(node, key)}", docs.get(key, "")))
    return out


def _entry(left: str, doc: str) -> str:
    pad = 34
    head = f"  {left}"
    body = textwrap.wrap(doc, WIDTH - pad) or [""]
    if len(head) >= pad:
        return "\n".join([head, *(" " * pad + line for line in body)]).rstrip()
    return "\n".join([head.ljust(pad) + body[0], *(" " * pad + line for line in body[1:])]).rstrip()


def run_help(overrides: list[str]) -> str:
    """`dpsuite run --help`: every key of the config (as chosen by ``overrides``' groups)."""
    groups = [o for o in overrides if o.split("=", 1)[0] in GROUPS]
    cfg = compose.compose_config(groups)
    parts = [
        "usage: dpsuite run [-m] [KEY=VALUE ...]   (Hydra overrides; -m: a sweep over A,B values)",
        "",
        "One run on this machine (workers=N starts N processes; under torchrun or srun the ranks",
        "join). Every key below can be set; `dpsuite run --cfg job` prints the composed config.",
        "",
        "config groups (KEY=NAME):",
    ]
    for group in GROUPS:
        chosen = cfg[group].name
        choices = ", ".join(compose.group_choices(group))
        parts.append(_entry(f"{group}={chosen}", f"one of: {choices}"))
    for group in GROUPS:
        docs = field_docs(OmegaConf.get_type(cfg[group]))
        keys = [k for k in cfg[group] if k != "name"]
        if keys:
            parts += ["", f"{group}={cfg[group].name} keys:"]
            parts += [_entry(f"{group}.{k}={_value(cfg[group], k)}", docs.get(k, "")) for k in keys]
    parts += ["", "keys:", *_lines(cfg)]
    parts += [
        "",
        "A value of ${other.key} follows that key unless set. Add `workload=NAME`",
        "(or lr_rule=, sync=) to --help to see that choice's own keys.",
    ]
    return "\n".join(parts)


def preset_text(name: str) -> str:
    """The comment at the top of a preset's YAML file (what it is for)."""
    file = resources.files(compose.CONFIG_MODULE).joinpath("sweep", f"{name}.yaml")
    lines = []
    for line in file.read_text().splitlines():
        if not line.startswith("#"):
            break
        if not line.startswith("# @package"):
            lines.append(line.lstrip("# ").rstrip())
    return " ".join(lines)


def sweep_list() -> str:
    out = [
        "usage: dpsuite sweep NAME [KEY=VALUE ...] [--dry-run]",
        "",
        "A sweep preset (suite/conf/sweep/NAME.yaml); a KEY=A,B on the command line replaces",
        "the preset's axis of that key. Rerunning a sweep resumes it. `dpsuite sweep NAME",
        "--help` shows a preset's axes and runs; --dry-run lists the runs without running them.",
        "",
        "presets:",
    ]
    for name in compose.preset_names():
        first = preset_text(name).split(". ")[0]
        out.append(_entry(name, first))
    return "\n".join(out)


def preset_help(name: str, overrides: list[str]) -> str:
    from dpsuite.sweep.runner import planned

    sweeps = planned(name, overrides, writing=False)
    out = [f"usage: dpsuite sweep {name} [KEY=VALUE ...] [--dry-run]", "", preset_text(name), ""]
    for sweep in sweeps:
        label = f"{sweep.label}: " if len(sweeps) > 1 else ""
        axes = ", ".join(f"{k}={v}" for k, v in sweep.plan.grid.items()) or "(one run)"
        dirs = ", ".join(str(d) for d in sweep.results_dirs)
        out.append(f"{label}{len(sweep.run_dirs)} runs over {axes} -> {dirs}")
    return "\n".join(textwrap.fill(line, WIDTH) if len(line) > WIDTH else line for line in out)


def dry_run(preset: str | None, overrides: list[str]) -> str:
    """What `dpsuite sweep NAME` (or `dpsuite run -m`) would run: every point, its run id, and
    whether a complete result already stands for it."""
    from dpsuite.engine.launch import reusable
    from dpsuite.sweep.runner import planned

    out = []
    total = todo = 0
    for sweep in planned(preset, overrides, writing=False):
        this_machine = not sweep.plan.launcher.remote
        out.append(f"{sweep.label} -> {', '.join(str(d) for d in sweep.results_dirs)}")
        axes = list(sweep.plan.grid) + [
            o.split("=", 1)[0] for o in overrides if "," in o and "=" in o
        ]
        for spec in sweep.specs.values():
            done = reusable(spec, this_machine=this_machine)
            values = " ".join(f"{k}={_lookup(spec.config, k)}" for k in dict.fromkeys(axes))
            out.append(f"  {'skip' if done else 'run '}  {spec.run_id}  {values}".rstrip())
            total += 1
            todo += not done
    out.append(f"{total} runs: {todo} to run, {total - todo} complete already (skipped)")
    return "\n".join(out)


def _lookup(config: dict[str, Any], dotted: str) -> Any:
    node: Any = config
    for part in dotted.lstrip("+").split("."):
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, dict) and "name" in node:
        return node["name"]
    return node
