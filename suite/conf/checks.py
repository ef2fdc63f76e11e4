"""Generic checks of a composed config against its schema, each failure one line.

* keys that are not in the schema (``+train.epoch=3``, a typo of ``epochs``), with a guess;
* the bounds in the schema's field metadata (``ge``, ``gt``, ``le``, ``lt``, ``choices``);
* every number finite (``workload.base_lr=inf`` is a typo, not a result).

Also the field documentation (the string below each field) for ``dpsuite run --help``.
"""

from __future__ import annotations

import ast
import inspect
import math
import textwrap
from dataclasses import fields, is_dataclass
from functools import cache
from typing import Any

from omegaconf import DictConfig, OmegaConf

from dpsuite.errors import UserError, did_you_mean

# Mappings in the schema whose keys are fixed though their type is a plain dict.
FIXED_MAPPINGS = {"batch": ("per_worker", "global")}


def field_metadata(cls: type, name: str) -> dict[str, Any]:
    """A field's metadata, from the first class along the MRO that gives it any.

    Subclasses restate a base field only to change its default (a workload's recipe); its
    bounds stay where the base class declared them.
    """
    for klass in cls.__mro__:
        if is_dataclass(klass):
            for f in fields(klass):
                if f.name == name and f.metadata:
                    return dict(f.metadata)
    return {}


def describe_bounds(meta: dict[str, Any]) -> str:
    """ "in [0, 1)", ">= 1", "one of a, b": what a field's metadata allows."""
    if "choices" in meta:
        return "one of " + ", ".join(meta["choices"])
    low = next(((k, meta[k]) for k in ("ge", "gt") if k in meta), None)
    high = next(((k, meta[k]) for k in ("le", "lt") if k in meta), None)
    if low and high:
        left, right = "[" if low[0] == "ge" else "(", "]" if high[0] == "le" else ")"
        return f"in {left}{_shown(low[1])}, {_shown(high[1])}{right}"
    sign = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}
    key, bound = low or high or ("", None)
    return f"{sign[key]} {_shown(bound)}" if key else ""


def _shown(bound: float) -> str:
    """A bound as written: integers in full (2**32 - 1 is not 4.29497e+09)."""
    return str(bound) if isinstance(bound, int) else f"{bound:g}"


def _violates(value: Any, meta: dict[str, Any]) -> bool:
    if "choices" in meta:
        return value not in meta["choices"]
    return any(
        (k == "ge" and not value >= b)
        or (k == "gt" and not value > b)
        or (k == "le" and not value <= b)
        or (k == "lt" and not value < b)
        for k, b in meta.items()
        if k in ("ge", "gt", "le", "lt")
    )


def check_value(key: str, value: Any, meta: dict[str, Any]) -> None:
    """UserError naming ``key`` when ``value`` is non-finite or outside its bounds."""
    if isinstance(value, float) and not math.isfinite(value):
        raise UserError(f"{key} must be a finite number, got {value}")
    if value is None or not meta or not _violates(value, meta):
        return
    bounds = describe_bounds(meta)
    if "choices" in meta:
        raise UserError(f"{key} must be {bounds}, got '{value}'")
    if isinstance(value, int) and not isinstance(value, bool) and bounds.startswith(">"):
        raise UserError(f"{key} must be an integer {bounds}, got {value!r}")
    raise UserError(f"{key} must be {bounds}, got {value}")


def check_bounds(obj: Any, prefix: str = "") -> None:
    """Check every field of a config object (dataclass instances, recursively)."""
    for f in fields(obj):
        key, value = f"{prefix}{f.name}", getattr(obj, f.name)
        if is_dataclass(value):
            check_bounds(value, f"{key}.")
        elif isinstance(value, list):  # a list field's bounds hold for each element
            for item in value:
                check_value(key, item, field_metadata(type(obj), f.name))
        else:
            check_value(key, value, field_metadata(type(obj), f.name))


def unknown_keys(cfg: DictConfig, prefix: str = "") -> list[tuple[str, list[str]]]:
    """Keys of ``cfg`` its schema does not have, each with the keys it does have there."""
    found: list[tuple[str, list[str]]] = []
    schema = OmegaConf.get_type(cfg)
    known = [f.name for f in fields(schema)] if is_dataclass(schema) else None
    fixed = FIXED_MAPPINGS.get(prefix.rstrip("."))
    if fixed is not None:
        known = list(fixed)
    for key in cfg:
        key = str(key)
        if key == "hydra" and not prefix:
            continue
        if known is not None and key not in known:
            found.append((f"{prefix}{key}", known))
            continue
        node = cfg._get_node(key)
        if isinstance(node, DictConfig) and not node._is_none() and not node._is_missing():
            found += unknown_keys(node, f"{prefix}{key}.")
    return found


def check_keys(cfg: DictConfig) -> None:
    """UserError for the first key that is not in the schema, with a did-you-mean."""
    unknown = unknown_keys(cfg)
    if not unknown:
        return
    key, known = unknown[0]
    parent, _, leaf = key.rpartition(".")
    hint = did_you_mean(leaf, known, prefix=f"{parent}." if parent else "")
    where = f"{parent} has: {', '.join(known)}" if parent else "see `dpsuite run --help`"
    raise UserError(f"unknown config key '{key}'{hint}; {where}")


@cache
def field_docs(cls: type) -> dict[str, str]:
    """The documentation string below each field of a dataclass (its bases' too)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not is_dataclass(klass):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for node, after in zip(body, body[1:], strict=False):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[node.target.id] = " ".join(after.value.value.split())
    return docs
