"""`dpsuite predict --dump-tensors SOURCE`: a workload's gradient tensors as the file
``--tensors`` reads, from a run (its run.json's ``param_numels``) or from the workload's model
built on the meta device (``workload=NAME key=value ...``, the workload's config keys)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from dpsuite.analysis.scaling.tensor_file import TensorList
from dpsuite.errors import UserError

USAGE = "give a run.json, a run directory, or workload=NAME [key=value ...]"


def dumped_tensors(spec: list[str]) -> TensorList:
    """The tensor list ``spec`` names; a bad one is one UserError."""
    if not spec:
        raise UserError(f"--dump-tensors: {USAGE}")
    if spec[0].startswith("workload="):
        return _from_workload(_pairs(spec))
    if len(spec) > 1:
        raise UserError(f"--dump-tensors: one run at a time, got {len(spec)} ({USAGE})")
    return _from_run(Path(spec[0]))


def _pairs(spec: list[str]) -> dict[str, Any]:
    """``key=value`` words as a mapping, each value read as YAML (64 → int, true → bool)."""
    pairs: dict[str, Any] = {}
    for word in spec:
        key, sep, value = word.partition("=")
        if not sep or not key:
            raise UserError(f"--dump-tensors: {word!r} is not key=value ({USAGE})")
        if key in pairs:
            raise UserError(f"--dump-tensors: {key} given twice")
        try:
            pairs[key] = yaml.safe_load(value) if value else ""
        except yaml.YAMLError:
            pairs[key] = value
    return pairs


def _from_workload(pairs: dict[str, Any]) -> TensorList:
    import torch

    from dpsuite.workloads import get_workload

    name = str(pairs.pop("workload"))
    try:
        workload = get_workload(name, **pairs)
        with torch.device("meta"):  # the shapes only: no memory, no weights
            model = workload.build_model()
    except (KeyError, TypeError, ValueError) as exc:
        detail = str(exc.args[0]) if exc.args else type(exc).__name__
        raise UserError(f"--dump-tensors workload={name}: {detail}") from None
    numels = tuple(p.numel() for p in model.parameters() if p.requires_grad)
    if not numels:
        raise UserError(f"--dump-tensors workload={name}: the model has no trainable tensors")
    shown = " ".join(f"{k}={v}" for k, v in pairs.items())
    return TensorList(numels, workload=name, source=f"built: workload={name} {shown}".strip())


def _from_run(path: Path) -> TensorList:
    record = path / "run.json" if path.is_dir() else path
    try:
        run = json.loads(record.read_text())
    except OSError as exc:
        raise UserError(f"--dump-tensors {path}: cannot read: {exc.strerror or exc}") from None
    except ValueError:
        raise UserError(f"--dump-tensors {path}: {record.name} is not JSON") from None
    numels = run.get("param_numels") if isinstance(run, dict) else None
    if not isinstance(numels, list) or not numels or not all(isinstance(n, int) for n in numels):
        raise UserError(f"--dump-tensors {path}: the run recorded no param_numels")
    return TensorList(
        tuple(numels), workload=str(run.get("workload", "")), source=f"run: {run.get('run_id')}"
    )
