"""Which runs `dpsuite compare` sets side by side: its sides, and the pairs of a baseline A and a
candidate B among them.

A side is, by default, a machine (`data.machine_label`). Directories that each hold one machine
pair the first with every other, as they always did. Where a directory holds several machines
(or one machine is in several directories), each machine is paired with its counterpart in the
first directory (the same name, else the same machine id, else the same CPU and accelerators):
never a GPU node with a CPU VM because they happen to share a tree. ``--by SETTING`` groups the
runs of each machine by a setting instead (a hardware field, a run setting, any ``config.`` key,
or ``dir``: the directory), its first value being the baseline; with no ``--by`` and one
machine, the one setting that differs between runs of a configuration is used.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

MACHINE, DIR = "machine", "dir"  # --by values beside the columns
SOURCE = "source"  # the column of the directory a row was read from, as given
# How the runs were made, beyond the configuration compared: a side's line names each one whose
# values differ between the sides (and every environment variable recorded).
RUN_SETTINGS = {
    "threads_per_worker": "threads/worker",
    "backend": "backend",
    "precision": "precision",
    "bucket_cap_mb": "bucket MiB",
    "device": "device",
    "comm_timing": "comm timing",
    "timed_steps": "timed steps",
    "config.workload.num_samples": "samples",
    "config.ddp.start_method": "start method",
    "config.timing.warmup_steps": "warmup steps",
    "config.timing.comm_every": "comm every",
    "config.timing.comm_hook": "comm hook",
    "hardware.cpus_usable": "usable cores",
    "hardware.cpus_allocated": "allocated cores",
    "hardware.torch": "torch",
    "hardware.cuda": "CUDA",
    "hardware.nccl": "NCCL",
    "hardware.cudnn": "cuDNN",
    "hardware.gpu_driver": "driver",
    "hardware.torch_debug_build": "torch debug build",
    "hardware.python": "python",
    "hardware.os_release": "OS",
}
ENV_PREFIX = "hardware.env."
# A measured count, not a choice: it differs between workloads and is never a side.
NOT_A_SIDE = {"timed_steps"}
HARDWARE = ["hardware.cpu", "hardware.accelerator", "hardware.accelerator_count"]


@dataclass
class Pairing:
    by: str  # MACHINE, DIR or the column the runs of each machine are grouped by
    pairs: list[tuple[str, str]] = field(default_factory=list)  # (baseline A, candidate B)
    unpaired: list[str] = field(default_factory=list)  # sides left out, and why
    note: str | None = None  # how the sides were chosen, where not given
    suggest: list[str] = field(default_factory=list)  # settings to --by when nothing pairs
    # Each row's side (runs or comm-bench rows; NaN where a row has none).
    label: Callable[[pd.DataFrame], pd.Series] = lambda rows: rows[MACHINE]

    @property
    def sides(self) -> list[str]:
        """Every side of a pair, baselines first."""
        return list(dict.fromkeys([a for a, _ in self.pairs] + [b for _, b in self.pairs]))


def missing(value) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value))


def text(value) -> str:
    """A setting's value as a side's label and a machine line write it."""
    if missing(value):
        return "unset"
    if isinstance(value, float) and value.is_integer():
        return f"{value:g}"
    return str(value).lower() if isinstance(value, bool) else str(value)


def setting_name(column: str) -> str:
    if column == DIR:
        return "directory"
    return RUN_SETTINGS.get(column) or column.removeprefix(ENV_PREFIX)


def resolve(runs: pd.DataFrame, by: str) -> str:
    """The column ``--by`` names: as given, or under ``hardware.`` or ``config.``."""
    if by in (MACHINE, DIR) or by in runs.columns:
        return by
    for prefix in ("hardware.", "config."):
        if prefix + by in runs.columns:
            return prefix + by
    return by  # not recorded: `pair` says so


def pair(runs: pd.DataFrame, by: str | None, key: list[str]) -> Pairing:
    """The pairs to compare among ``runs`` (or comm-bench rows, by machine), and how a row's
    side is named; ``key``: what makes two runs the same configuration."""
    if by is not None and by != MACHINE:
        return by_setting(runs, resolve(runs, by))
    pairing = by_machine(runs)
    if pairing.pairs or by == MACHINE or runs[MACHINE].nunique() > 1:
        return pairing
    varying = varying_settings(runs, key)
    if len(varying) == 1:
        pairing = by_setting(runs, varying[0])
        pairing.note = (
            f"Grouped by {setting_name(varying[0])} (--by {varying[0]}): every run is on one "
            "machine, and it is the one setting that differs between runs of a configuration."
        )
        return pairing
    pairing.suggest = varying
    return pairing


def by_machine(runs: pd.DataFrame) -> Pairing:
    """Sides by machine: the first directory's machine against every other, or, where a
    directory holds several machines, each machine against its counterpart in the first."""
    per_dir = {d: list(dict.fromkeys(g[MACHINE])) for d, g in _in_order(runs).groupby(SOURCE)}
    per_dir = {d: per_dir[d] for d in _dirs(runs)}
    machines = [m for ms in per_dir.values() for m in ms]
    if len(per_dir) == 1 or (
        all(len(ms) == 1 for ms in per_dir.values()) and len(set(machines)) == len(machines)
    ):
        order = list(dict.fromkeys(machines))
        return Pairing(MACHINE, [(order[0], m) for m in order[1:]])
    first, *others = per_dir
    pairing = Pairing(MACHINE, label=lambda rows: rows[MACHINE] + " in " + rows[SOURCE])
    matched = set()
    for d in others:
        for m in per_dir[d]:
            twin = counterpart(runs, m, per_dir[first])
            if twin is None:
                pairing.unpaired.append(
                    f"{m} in {d}: no counterpart in {first} (no machine there with its name, "
                    "machine id, or CPU and accelerators)"
                )
                continue
            matched.add(twin)
            pairing.pairs.append((f"{twin} in {first}", f"{m} in {d}"))
    pairing.unpaired += [
        f"{m} in {first}: no counterpart" for m in per_dir[first] if m not in matched
    ]
    return pairing


def counterpart(runs: pd.DataFrame, machine: str, candidates: list[str]) -> str | None:
    """The machine among ``candidates`` that ``machine`` is: the same name, else the same
    machine id, else the only one with the same CPU and accelerators."""
    if machine in candidates:
        return machine
    first = runs.drop_duplicates(MACHINE).set_index(MACHINE)
    for columns in (["hardware.machine_id"], HARDWARE):
        columns = [c for c in columns if c in first.columns]
        if not columns:
            continue
        mine = tuple(text(v) for v in first.loc[machine, columns])
        if all(v == "unset" for v in mine):
            continue
        same = [c for c in candidates if tuple(text(v) for v in first.loc[c, columns]) == mine]
        if len(same) == 1:
            return same[0]
    return None


def by_setting(runs: pd.DataFrame, column: str) -> Pairing:
    """Sides by the value of ``column`` on each machine: the value of the earliest directory
    (then the lowest, versions in numeric order) is the baseline."""
    if column != DIR and column not in runs.columns:
        return Pairing(column, label=lambda rows: pd.Series(np.nan, index=rows.index))
    name = "" if column == DIR else setting_name(column) + " "
    several = runs[MACHINE].nunique() > 1

    def label(rows: pd.DataFrame) -> pd.Series:
        if column not in rows.columns and column != DIR:
            return pd.Series(np.nan, index=rows.index)
        values = rows[SOURCE] if column == DIR else rows[column].map(text)
        return name + values + ((" on " + rows[MACHINE]) if several else "")

    pairing = Pairing(column, label=label)
    ordered = _in_order(
        runs.assign(_value=runs[SOURCE] if column == DIR else runs[column].map(text))
    )
    for machine, grp in ordered.groupby(MACHINE, sort=False):
        first_seen = grp.groupby("_value")["source_index"].min()
        order = sorted(first_seen.index, key=lambda v: (first_seen[v], natural(v)))
        side = {v: name + v + (f" on {machine}" if several else "") for v in order}
        if len(order) < 2:
            pairing.unpaired.append(f"{machine}: every run has {name}{order[0]}")
        pairing.pairs += [(side[order[0]], side[v]) for v in order[1:]]
    return pairing


def varying_settings(runs: pd.DataFrame, key: list[str]) -> list[str]:
    """The run settings (and environment variables) whose values differ between runs of one
    configuration on one machine: what a comparison on one machine could be by."""
    env = sorted(c for c in runs.columns if c.startswith(ENV_PREFIX))
    columns = [c for c in [*RUN_SETTINGS, *env] if c in runs.columns and c not in NOT_A_SIDE]
    groups = [runs[k] for k in [MACHINE, *key] if k in runs.columns]
    out = []
    for column in columns:
        values = runs[column].map(text)
        if values.groupby(groups, dropna=False).nunique().gt(1).any():
            out.append(column)
    return out


def natural(value: str) -> list:
    """A sort key that puts 2.9 before 2.13."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in _parts(value)]


def _parts(value: str) -> list[str]:
    return [p for p in re.split(r"(\d+)", value) if p]


def _dirs(runs: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(_in_order(runs)[SOURCE]))


def _in_order(runs: pd.DataFrame) -> pd.DataFrame:
    return runs.sort_values("source_index", kind="stable")
