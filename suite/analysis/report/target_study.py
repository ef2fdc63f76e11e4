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
* The oracle checks itself: a batch with fewer than ``MIN_LRS`` distinct peak LRs, or whose
  best LR is the largest or smallest tried, is not known to be tuned; and where the oracle's
  steps fall below half between a batch and its double beyond the seeds' spread (the largest
  seed at 2B below half the smallest at B), the smaller batch cannot have been tuned: with a
  tuned baseline steps never fall faster than perfect scaling (Shallue et al. 2018).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from dpsuite.analysis.report import data

GRID_RULE = "power"  # the rule whose exponent is swept to search for the best LR
BASE_SETTING = "every rule (base LR)"  # the runs at the base batch, where the rules agree
NEVER = math.inf  # steps of a run that did not reach the target
MIN_LRS = 3  # distinct peak LRs a batch needs before its best one can be interior
PEAK_LR_KEY = "config.lr_rule.peak_lr"  # the grid rule's absolute peak LR, when set
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


ACCURACY, LOSS = "eval_acc", "eval_loss"  # the metrics a target may be set on


def target_metric(group: pd.DataFrame) -> pd.Series:
    """Per run, the metric its target was set on (``eval_acc`` where run.json does not say)."""
    metric = group.get("target_metric", pd.Series(index=group.index, dtype=object))
    return metric.fillna(ACCURACY)


def target_values(group: pd.DataFrame) -> pd.Series:
    """Per run, the target actually used: ``target_loss`` for a loss target, else
    ``target_acc``."""
    loss = group.get("target_loss", pd.Series(math.nan, index=group.index))
    acc = group.get("target_acc", pd.Series(math.nan, index=group.index))
    return pd.to_numeric(loss.where(target_metric(group) == LOSS, acc), errors="coerce")


def target_of(group: pd.DataFrame) -> tuple[str, float]:
    """The group's (metric, target): its first run's."""
    values = target_values(group).dropna()
    return str(target_metric(group).loc[values.index[0]]), float(values.iloc[0])


def has_target(group: pd.DataFrame) -> bool:
    """Whether the group records steps to a target: one target (metric and value), reached by
    some run."""
    used = pd.DataFrame({"metric": target_metric(group), "value": target_values(group)})
    one = len(used.dropna().drop_duplicates()) == 1
    return one and group["steps_to_target"].notna().any()


def reaches(values: np.ndarray, target: float, metric: str) -> np.ndarray:
    """Which values reach the target: an accuracy at or above it, a loss at or below it."""
    return values <= target if metric == LOSS else values >= target


def setting_label(rule: str, exponent: float, peak: float = math.nan) -> str:
    """The name of an LR setting: the rule, or for the grid rule its absolute peak LR (``LR
    0.4``) or its exponent (``power 0.6``)."""
    if rule != GRID_RULE:
        return rule
    if pd.notna(peak):
        return f"LR {peak:g}"
    return f"{rule} {exponent:g}" if pd.notna(exponent) else rule


def base_batch(group: pd.DataFrame) -> int | None:
    """The batch where every rule gives the base LR, when the group ran it."""
    bases = group["base_batch"].dropna().unique()
    if len(bases) != 1 or not (group["global_batch"] == bases[0]).any():
        return None
    return int(bases[0])


def finished_runs(group: pd.DataFrame) -> pd.DataFrame:
    """Complete and diverged runs with their setting and ``steps`` (``NEVER`` if not reached);
    at the base batch the rules' runs form the one base setting, each trajectory once."""
    runs = group[group["status"].isin(["complete", "diverged"])]  # a frame of its own
    peaks = runs[PEAK_LR_KEY] if PEAK_LR_KEY in runs else pd.Series(math.nan, index=runs.index)
    runs["setting"] = [
        setting_label(r, e, p)
        for r, e, p in zip(runs["lr_rule"], runs["lr_exponent"], peaks, strict=True)
    ]
    runs["steps"] = runs["steps_to_target"].astype(float).fillna(NEVER)
    warm = runs["warmup_epochs"].fillna(0).astype(float) > 0
    if warmup_splits_settings(runs, warm):  # with and without warmup at one LR: two settings
        runs.loc[warm & (runs["lr_rule"] == GRID_RULE), "setting"] += " + warmup"
    base = base_batch(group)
    if base is None:
        return runs
    # the base recipe: at the base batch, at the base LR, whatever the rule is called
    shared = (
        (runs["global_batch"] == base)
        & ~runs["lr_rule"].isin(data.OWN_RECIPE_RULES)
        & np.isclose(runs["peak_lr"].astype(float), runs["base_lr"].astype(float))
    )
    merged = data.distinct_runs(runs[shared]).assign(setting=BASE_SETTING)
    return pd.concat([runs[~shared], merged], ignore_index=True)


def warmup_splits_settings(runs: pd.DataFrame, warm: pd.Series) -> bool:
    """Whether some grid setting holds runs with and without warmup (then warmup names its own
    settings: their seeds are not one setting's)."""
    grid = runs["lr_rule"] == GRID_RULE
    if not grid.any():
        return False
    kinds = warm[grid].groupby([runs.loc[grid, "setting"], runs.loc[grid, "global_batch"]])
    return bool((kinds.nunique() > 1).any())


# What the settings (``settings_table``, ``seed_steps``) are made of: a study asks for them many
# times (each target, each alternative fit), and every column of a wide group would be copied.
SETTING_INPUTS = (
    "status",
    "lr_rule",
    "lr_exponent",
    PEAK_LR_KEY,
    "steps_to_target",
    "base_batch",
    "total_steps",
    *data.TRAJECTORY_KEY,  # global_batch, seed, peak_lr, warmup_epochs, schedule, base_lr
)


def setting_columns(group: pd.DataFrame, *extra: str) -> pd.DataFrame:
    """``group`` with only the columns the settings are made of (and ``extra``)."""
    return group[[c for c in dict.fromkeys((*SETTING_INPUTS, *extra)) if c in group]]


def setting_runs(group: pd.DataFrame) -> pd.DataFrame:
    """``finished_runs`` of ``group`` with only the columns the settings are made of."""
    return finished_runs(setting_columns(group))


def settings_table(group: pd.DataFrame) -> pd.DataFrame:
    """Per LR setting and global batch: the censored median steps over seeds (``steps``, inf
    when half the seeds or more missed), ``seeds`` and how many ``reached`` the target, the
    setting's ``peak_lr`` and the budget in steps (``budget_steps``)."""
    runs = setting_runs(group)
    if runs.empty:
        return pd.DataFrame(columns=SETTINGS_COLUMNS)
    rows = []
    # only the columns read: a group of a wide frame copies every column
    read = ["setting", "global_batch", "lr_rule", "lr_exponent", "steps", "peak_lr", "total_steps"]
    narrow = runs[read]
    for (setting, batch), grp in narrow.groupby(["setting", "global_batch"], sort=True):
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
    ``budget_steps``, ``lrs`` (distinct peak LRs tried), ``too_few_lrs`` (fewer than
    ``MIN_LRS``) and ``at_grid_edge`` (the best is the largest or smallest of them). Own-recipe
    rules (lars) take part: they are LRs tried, too."""
    rows = []
    for batch, grp in settings.groupby("global_batch", sort=True):
        best = grp.loc[grp["steps"].idxmin()]
        reached = math.isfinite(best["steps"])
        lrs = distinct_lrs(grp["peak_lr"])
        rows.append(
            {
                "global_batch": int(batch),
                "steps": float(best["steps"]),
                "setting": best["setting"] if reached else None,
                "peak_lr": best["peak_lr"] if reached else math.nan,
                "seeds": int(best["seeds"]),
                "reached": int(best["reached"]),
                "tried": len(grp),
                "lrs": len(lrs),
                "budget_steps": grp["budget_steps"].median(),
                "too_few_lrs": len(lrs) < MIN_LRS,
                "at_grid_edge": reached and at_grid_edge(lrs, best["peak_lr"]),
            }
        )
    return pd.DataFrame(rows)


def distinct_lrs(peaks: pd.Series) -> list[float]:
    """The distinct peak LRs, sorted (two settings at one LR, e.g. with and without warmup, are
    one LR)."""
    return sorted({float(f"{p:.6g}") for p in peaks.dropna()})


def at_grid_edge(lrs: list[float], best: float) -> bool:
    """Whether ``best`` is the largest or smallest of ``lrs`` (two or more): the best-tuned
    steps may then lie beyond the grid."""
    if len(lrs) < 2 or pd.isna(best):
        return False
    return bool(float(f"{best:.6g}") in (lrs[0], lrs[-1]))


def untuned(best: pd.DataFrame) -> pd.DataFrame:
    """The oracle's batches that are not known to be tuned: fewer than ``MIN_LRS`` LRs, or the
    best at the grid's edge (global_batch, lrs, too_few_lrs, at_grid_edge, peak_lr, setting)."""
    flagged = best[best["too_few_lrs"] | best["at_grid_edge"]]
    return flagged[
        ["global_batch", "lrs", "too_few_lrs", "at_grid_edge", "peak_lr", "setting"]
    ].reset_index(drop=True)


def seed_steps(group: pd.DataFrame) -> dict[tuple[str, int], np.ndarray]:
    """Per (setting, global batch): every seed's steps (``NEVER`` where it missed)."""
    runs = setting_runs(group)
    return {
        (setting, int(batch)): grp["steps"].to_numpy(float)
        for (setting, batch), grp in runs[["setting", "global_batch", "steps"]].groupby(
            ["setting", "global_batch"], sort=True
        )
    }


def faster_than_perfect(
    best: pd.DataFrame, seeds: dict[tuple[str, int], np.ndarray]
) -> pd.DataFrame:
    """Pairs (B, 2B) of the oracle where steps fall below half beyond the seeds' spread: every
    seed of the best LR at 2B below half of every seed of the best LR at B. Columns:
    global_batch, double, steps, double_steps, ratio (double_steps / steps)."""
    by_batch = best.set_index("global_batch")
    rows = []
    for batch, row in by_batch.iterrows():
        double = 2 * int(batch)
        if double not in by_batch.index or not math.isfinite(row["steps"]):
            continue
        other = by_batch.loc[double]
        if not math.isfinite(other["steps"]):
            continue
        small = seeds.get((row["setting"], int(batch)), np.array([row["steps"]]))
        large = seeds.get((other["setting"], double), np.array([other["steps"]]))
        if np.max(large) < 0.5 * np.min(small):
            rows.append(
                {
                    "global_batch": int(batch),
                    "double": double,
                    "steps": float(row["steps"]),
                    "double_steps": float(other["steps"]),
                    "ratio": float(other["steps"] / row["steps"]),
                }
            )
    columns = ["global_batch", "double", "steps", "double_steps", "ratio"]
    return pd.DataFrame(rows, columns=columns)


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


def oracle_runs(group: pd.DataFrame, best: pd.DataFrame) -> pd.DataFrame:
    """The runs of the best LR setting at each batch that reached the target (run_id,
    global_batch, steps, ...)."""
    runs = finished_runs(group)
    chosen = best[np.isfinite(best["steps"])][["global_batch", "setting"]]
    picked = runs.merge(chosen, on=["global_batch", "setting"])
    return picked[np.isfinite(picked["steps"])].reset_index(drop=True)
