"""The fields every workload's config has: its name and its small-batch reference recipe.

Field metadata states the bounds the config checker enforces (``ge``, ``gt``, ``le``, ``lt``,
``choices``); a string right below a field documents it (`dpsuite run --help` shows it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

# The reference recipe: how the workload trains at its small batch. Not part of the data key.
RECIPE_FIELDS = ("base_lr", "base_batch", "epochs", "target_acc", "target_loss", "weight_decay")


@dataclass
class WorkloadConfig:
    """Fields every workload has: its name and its small-batch reference recipe."""

    # The class that builds the workload, as `module:Class`: a built-in's config names it, and
    # it is imported only when a run needs it (help and completion read the config alone).
    class_path: ClassVar[str] = ""
    # Values of this config's fields that make the workload small enough for a quick check:
    # the contract test trains every built-in with them on two workers for a few steps.
    small: ClassVar[Mapping[str, Any]] = {}

    name: str = ""
    """The workload (a config group choice: `workload=NAME`)."""
    base_lr: float = field(default=0.1, metadata={"gt": 0})
    """SGD learning rate at `base_batch`: the small-batch recipe the LR rules scale from."""
    base_batch: int = field(default=32, metadata={"ge": 1})
    """Global batch at which `base_lr` is the right LR."""
    epochs: int = field(default=10, metadata={"ge": 1})
    """Epochs of the reference recipe (`train.epochs` defaults to it)."""
    target_acc: float = field(default=0.85, metadata={"gt": 0, "le": 1})
    """Eval accuracy (a fraction) that counts as reaching the target (steps-to-target)."""
    weight_decay: float = field(default=5e-4, metadata={"ge": 0})
    """L2 weight decay of the recipe (`optimizer.weight_decay` defaults to it)."""

    def check(self) -> None:
        """Raise ValueError naming the key when a value cannot work (beyond the field bounds)."""
