"""Steps to a target accuracy as the global batch grows, counted as Shallue et al. (2018) do.

* Per LR setting (a rule, or one exponent of the ``power`` grid) and global batch: the median
  over seeds of the optimizer steps to the target, a seed that never reached it (within the
  budget, or because it diverged) counting as infinitely many (censored). The median is then
  infinite when half the seeds or more missed, so the seeds that happened to make it never
  stand for those that did not.
* At the base batch (k = 1) every rule trains the small-batch recipe: those runs form one
  setting, each trajectory counted once (``data.distinct_runs``), which starts every rule's curve.
* The LR oracle: per batch, the lowest of those medians over every LR tried there (the
  best-tuned curve of Shallue et al.); a rule's efficiency at a batch is oracle steps / its
  steps (0 where it never reaches the target).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from suite.analysis.report import data

GRID_RULE = "power"  # the rule whose exponent is swept to search for the best LR
BASE_SETTING = "every rule (base LR)"  # the runs at the base batch, where the rules agree
NEVER = math.inf  # steps of a run that did not reach the target
SETTINGS_COLUMNS = [
    "setting",
    "lr_rule",
    "lr_exponent",
    "global_batch",
    "steps",
    "seeds",
    "reached",
    "peak_lr",
    "budget_steps",
]


def has_target(group: pd.DataFrame) -> bool:
    """Whether the group records steps to a target: one target, reached by some run."""
    return group["target_acc"].nunique() == 1 and group["steps_to_target"].notna().any()


def setting_label(rule: str, exponent: float) -> str:
    """The name of an LR setting: the rule, or for the grid rule its exponent too."""
    return f"{rule} {exponent:g}" if rule == GRID_RULE and pd.notna(exponent) else rule


def base_batch(group: pd.DataFrame) -> int | None:
    """The batch where every rule gives the base LR, when the group ran it."""
    bases = group["base_batch"].dropna().unique()
    if len(bases) != 1 or not (group["global_batch"] == bases[0]).any():
        return None
    return int(bases[0])


def finished_runs(group: pd.DataFrame) -> pd.DataFrame:
    """Complete and diverged runs with their setting and ``steps`` (``NEVER`` if not reached);
    at the base batch the rules' runs form the one base setting, each trajectory once."""
    runs = group[group["status"].isin(["complete", "diverged"])].copy()
    runs["setting"] = [
        setting_label(r, e) for r, e in zip(runs["lr_rule"], runs["lr_exponent"], strict=True)
    ]
    runs["steps"] = runs["steps_to_target"].astype(float).fillna(NEVER)
    base = base_batch(group)
    if base is None:
        return runs
    shared = (runs["global_batch"] == base) & ~runs["lr_rule"].isin(data.OWN_RECIPE_RULES)
    merged = data.distinct_runs(runs[shared]).assign(setting=BASE_SETTING)
    return pd.concat([runs[~shared], merged], ignore_index=True)


def settings_table(group: pd.DataFrame) -> pd.DataFrame:
    """Per LR setting and global batch: the censored median steps over seeds (``steps``, inf
    when half the seeds or more missed), ``seeds`` and how many ``reached`` the target, the
    setting's ``peak_lr`` and the budget in steps (``budget_steps``)."""
    runs = finished_runs(group)
    if runs.empty:
        return pd.DataFrame(columns=SETTINGS_COLUMNS)
    rows = []
    for (setting, batch), grp in runs.groupby(["setting", "global_batch"], sort=True):
        rows.append(
            {
                "setting": setting,
                "lr_rule": grp["lr_rule"].iloc[0] if setting != BASE_SETTING else BASE_SETTING,
                "lr_exponent": grp["lr_exponent"].median(),
                "global_batch": int(batch),
                "steps": float(np.median(grp["steps"])),
                "seeds": len(grp),
                "reached": int(np.isfinite(grp["steps"]).sum()),
                "peak_lr": grp["peak_lr"].median(),
                "budget_steps": grp["total_steps"].median(),
            }
        )
    return pd.DataFrame(rows, columns=SETTINGS_COLUMNS)


def rule_table(settings: pd.DataFrame) -> pd.DataFrame:
    """The named rules' rows (every setting but the grid's), each rule starting from the base
    setting where the rules agree."""
    named = settings[~settings["lr_rule"].isin([GRID_RULE, BASE_SETTING])]
    base = settings[settings["setting"] == BASE_SETTING]
    shared = [r for r in data.rule_order(named["lr_rule"]) if r not in data.OWN_RECIPE_RULES]
    starts = [base.assign(lr_rule=rule, setting=rule) for rule in shared if not base.empty]
    return pd.concat([*starts, named], ignore_index=True).sort_values(["lr_rule", "global_batch"])


def oracle(settings: pd.DataFrame) -> pd.DataFrame:
    """Per global batch, the setting with the fewest steps: ``steps`` (inf where no LR reached
    the target), ``setting``, ``peak_lr``, ``tried`` (LR settings run there) and
    ``budget_steps``. Own-recipe rules (lars) take part: they are LRs tried, too."""
    rows = []
    for batch, grp in settings.groupby("global_batch", sort=True):
        best = grp.loc[grp["steps"].idxmin()]
        reached = math.isfinite(best["steps"])
        rows.append(
            {
                "global_batch": int(batch),
                "steps": float(best["steps"]),
                "setting": best["setting"] if reached else None,
                "peak_lr": best["peak_lr"] if reached else math.nan,
                "seeds": int(best["seeds"]),
                "reached": int(best["reached"]),
                "tried": len(grp),
                "budget_steps": grp["budget_steps"].median(),
                "at_grid_edge": reached and at_grid_edge(grp, best),
            }
        )
    return pd.DataFrame(rows)


def at_grid_edge(tried: pd.DataFrame, best: pd.Series) -> bool:
    """Whether the best LR at a batch is the largest or smallest of three or more tried there:
    the best-tuned steps may then lie beyond the grid."""
    lrs = tried["peak_lr"].dropna()
    if lrs.nunique() < 3 or pd.isna(best["peak_lr"]):
        return False
    return bool(best["peak_lr"] in (lrs.max(), lrs.min()))


def efficiency(rules: pd.DataFrame, best: pd.DataFrame) -> pd.DataFrame:
    """Per rule and batch: oracle steps / the rule's steps (0 where the rule never reaches the
    target; left out where no LR did)."""
    joined = rules.merge(
        best[["global_batch", "steps"]].rename(columns={"steps": "oracle_steps"}),
        on="global_batch",
    )
    joined = joined[np.isfinite(joined["oracle_steps"])]
    return joined.assign(efficiency=joined["oracle_steps"] / joined["steps"])[
        ["lr_rule", "global_batch", "steps", "oracle_steps", "efficiency", "seeds", "reached"]
    ].reset_index(drop=True)
