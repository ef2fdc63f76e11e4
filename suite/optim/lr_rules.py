"""Learning-rate rules for large-batch training, as pure functions of the step.

A rule turns the workload's reference recipe (``base_lr`` at ``base_batch``) into a peak LR for
the global batch ``B``; the schedule then shapes the LR over training:

* ``naive``          keep ``base_lr`` whatever the batch;
* ``linear``         ``base_lr * B / base_batch``;
* ``linear_warmup``  linear, reached by a per-iteration ramp from ``base_lr`` over
                     ``warmup_epochs`` (Goyal et al. 2017, "gradual warmup");
* ``sqrt``           ``base_lr * sqrt(B / base_batch)``;
* ``power``          ``base_lr * (B / base_batch) ** lr_rule.exponent`` with warmup: any point
                     between the rules, the grid an LR oracle searches; or, with
                     ``lr_rule.peak_lr``, that absolute peak at every batch (an LR grid);
* ``lars``           ``base_lr * sqrt(B / base_batch)`` with warmup, for the LARS optimizer
                     (``dpsuite.optim.lars``), which further scales the LR per layer by a trust
                     ratio
                     (You et al. 2017). The trust ratio already sets each layer's step relative
                     to its weights; linear scaling of the global LR on top of it diverged on
                     MNIST-1D at batch 1024, so the global LR grows with the square root.

Warmup starts at ``base_lr`` and only ever goes up: where the peak is not above it (the base
batch, or a smaller one) there is none, so at k = 1 every rule is the small-batch recipe.
After the (optional) warmup comes the schedule: ``constant``, ``cosine`` to zero, ``step``
(multiply by ``gamma`` at each milestone, given as fractions of training) or ``poly``
(``(1 - progress) ** power``, LARS's decay).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

SCHEDULES = ("constant", "cosine", "step", "poly")


def II(key: str) -> str:  # noqa: N802 (OmegaConf's name for it)
    """OmegaConf's ``II``: the interpolation ``${key}`` (the config's value at ``key``), spelled
    out here: importing omegaconf for it cost every report and comparison 0.06 s."""
    return "${" + key + "}"


@dataclass
class LRRuleConfig:
    """The `lr_rule` config group: a rule and the knobs every rule has."""

    name: str = "naive"
    """The rule (a config group choice: `lr_rule=NAME`)."""
    warmup_epochs: float = field(default=0.0, metadata={"ge": 0})
    """Epochs of gradual warmup from base_lr to the rule's peak LR (rules that warm up)."""
    base_lr: float = field(default=II("workload.base_lr"), metadata={"gt": 0})
    """LR at the workload's base_batch (default: the workload's recipe)."""
    schedule: str = II("schedule.name")
    """Decay after warmup (default: `schedule.name`)."""


@dataclass
class LARSRuleConfig(LRRuleConfig):
    """LARS's global LR lives on its own scale: the trust ratio multiplies it per layer."""

    name: str = "lars"
    warmup_epochs: float = 1.0
    base_lr: float = 3.0
    schedule: str = "poly"
    trust_coefficient: float = field(default=0.001, metadata={"gt": 0})
    """eta in the trust ratio eta*|w|/(|g| + wd*|w|)."""


@dataclass
class PowerRuleConfig(LRRuleConfig):
    """Any exponent between the rules': the grid an LR oracle searches (best per batch)."""

    name: str = "power"
    warmup_epochs: float = 1.0
    exponent: float = field(default=0.5, metadata={"ge": 0})
    """Peak LR = base_lr x (B / base_batch) ** exponent: 0 is naive, 0.5 sqrt, 1 linear."""
    peak_lr: float | None = field(default=None, metadata={"gt": 0})
    """An absolute peak LR at every batch instead (null: from the exponent); warmup still
    starts at base_lr, and there is none when the peak is not above it."""


@dataclass(frozen=True)
class Rule:
    """An LR rule: the peak LR grows as base_lr x k ** exponent, k = global batch / base batch.

    Its traits travel with it: ``run.json`` records them (``lr_rule_own_recipe``,
    ``lr_rule_order``) and the reports read them, so no list of rule names is kept elsewhere.
    """

    name: str
    exponent: float | None  # None: the config's `exponent` (the power rule)
    config: LRRuleConfig  # its default config (the `lr_rule=NAME` group option)
    warms_up: bool = False
    optimizer: str = "sgd"  # "lars" swaps in the LARS optimizer
    own_recipe: bool = False  # brings its own base LR and schedule, not the workload's
    color: str | None = None  # the reports' colour for it (None: grey)


# In the order the reports list them (their `lr_rule_order`).
RULES: dict[str, Rule] = {
    r.name: r
    for r in (
        Rule("naive", 0.0, LRRuleConfig("naive"), color="#d62728"),
        Rule("linear", 1.0, LRRuleConfig("linear"), color="#ff7f0e"),
        Rule("linear_warmup", 1.0, LRRuleConfig("linear_warmup", 1.0), True, color="#2ca02c"),
        Rule("sqrt", 0.5, LRRuleConfig("sqrt"), color="#1f77b4"),
        Rule("lars", 0.5, LARSRuleConfig(), True, "lars", own_recipe=True, color="#9467bd"),
        Rule("power", None, PowerRuleConfig(), warms_up=True),
    )
}


def traits(rule: str) -> dict[str, bool | int]:
    """The rule's traits as ``run.json`` records them."""
    return {"lr_rule_own_recipe": RULES[rule].own_recipe, "lr_rule_order": list(RULES).index(rule)}


def exponent_of(rule: str, exponent: float | None = None) -> float:
    """The rule's exponent (the power rule's comes from its config)."""
    if rule not in RULES:
        raise ValueError(f"unknown lr_rule '{rule}' (choose from: {', '.join(RULES)})")
    fixed = RULES[rule].exponent
    if fixed is None and exponent is None:
        raise ValueError(f"lr_rule '{rule}' needs an exponent")
    return fixed if fixed is not None else float(exponent)  # type: ignore[arg-type]


def peak_lr(
    rule: str,
    base_lr: float,
    base_batch: int,
    global_batch: int,
    exponent: float | None = None,
    absolute: float | None = None,
) -> float:
    """The LR a rule reaches after warmup, before any decay (``absolute``: the power rule's
    ``peak_lr``, the same at every batch)."""
    if absolute is not None:
        return float(absolute)
    return base_lr * (global_batch / base_batch) ** exponent_of(rule, exponent)


def schedule_factor(
    progress: float,
    schedule: str,
    milestones: Sequence[float] = (0.5, 0.75),
    gamma: float = 0.1,
    power: float = 2.0,
) -> float:
    """Multiplier on the peak LR at ``progress`` in [0, 1] of the post-warmup phase."""
    progress = min(max(progress, 0.0), 1.0)
    if schedule == "constant":
        return 1.0
    if schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    if schedule == "step":
        return gamma ** sum(progress >= m for m in milestones)
    if schedule == "poly":
        return (1.0 - progress) ** power
    raise ValueError(f"unknown schedule '{schedule}' (choose from: {', '.join(SCHEDULES)})")


@dataclass(frozen=True)
class LRPlan:
    """Everything needed to know the LR at any step of one run."""

    rule: str
    base_lr: float
    base_batch: int
    global_batch: int
    steps_per_epoch: int
    total_steps: int
    warmup_epochs: float = 0.0
    schedule: str = "cosine"
    milestones: tuple[float, ...] = field(default=(0.5, 0.75))
    gamma: float = 0.1
    power: float = 2.0
    exponent: float | None = None  # the power rule's
    absolute_peak: float | None = None  # the power rule's `peak_lr`

    # Cached: the training loop asks for the LR at every step (the plan never changes).
    @cached_property
    def peak(self) -> float:
        return peak_lr(
            self.rule,
            self.base_lr,
            self.base_batch,
            self.global_batch,
            self.exponent,
            self.absolute_peak,
        )

    @cached_property
    def warmup_steps(self) -> int:
        """Gradual warmup goes up only: none where the peak is not above base_lr (at the base
        batch the rule is the small-batch recipe itself)."""
        if not RULES[self.rule].warms_up or self.peak <= self.base_lr:
            return 0
        return min(round(self.warmup_epochs * self.steps_per_epoch), self.total_steps)

    def lr_at(self, step: int) -> float:
        """LR for optimizer step ``step`` (0-based)."""
        warm = self.warmup_steps
        if step < warm:
            # Goyal et al.: start at the small-batch LR and add a constant amount every iteration.
            return self.base_lr + (self.peak - self.base_lr) * step / warm
        decay_steps = max(self.total_steps - warm, 1)
        progress = (step - warm) / decay_steps
        factor = schedule_factor(progress, self.schedule, self.milestones, self.gamma, self.power)
        return self.peak * factor
