"""The fields every workload's config has: its name and its small-batch reference recipe.

Field metadata states the bounds the config checker enforces (``ge``, ``gt``, ``le``, ``lt``,
``choices``); a string right below a field documents it (`dpsuite run --help` shows it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

# The reference recipe: how the workload trains at its small batch. Not part of the data key.
RECIPE_FIELDS = ("base_lr", "base_batch", "epochs", "target_acc", "weight_decay")


@dataclass
class WorkloadConfig:
    """Fields every workload has: its name and its small-batch reference recipe."""

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
