"""``dpsuite predict RESULTS``'s terms fitted to every worker count measured (1, 2, 4, ...), not
one point: the synchronisation term (``sync_cost``) to the measured efficiency at each count
above one, and a leave-last-out check on the user's own runs (fitted below the largest count,
the largest predicted), since the validation is then of counts the model was fitted on."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pandas as pd

from dpsuite.analysis.scaling.fit import Fit, hardware_key, validate
from dpsuite.analysis.scaling.model import ScalingModel
from dpsuite.analysis.scaling.sync_cost import with_sync


@dataclass(frozen=True)
class HeldOut:
    """The largest measured count predicted from the counts below it."""

    workers: int
    batch: int
    fitted_on: tuple[int, ...]
    predicted_s: float
    measured_s: float

    @property
    def error_pct(self) -> float:
        return 100 * (self.predicted_s - self.measured_s) / self.measured_s


def measured_steps(validation: pd.DataFrame) -> tuple[int, dict[int, float]] | None:
    """The per-worker batch measured at 1 and the most other counts (ties: the largest), and
    its median step time at each count; oversubscribed runs left out. None: no such batch."""
    ok = validation[~validation["oversubscribed"].astype(bool)] if len(validation) else validation
    best = None
    for batch, group in ok.groupby("per_worker_batch"):
        steps = dict(zip(group["workers"].astype(int), group["measured_step_s"], strict=True))
        if 1 in steps and len(steps) > 1 and (best is None or len(steps) >= len(best[1])):
            best = (int(batch), steps)
    return best


def _fitted(model: ScalingModel, steps: dict[int, float], batch: int) -> ScalingModel:
    efficiencies = {n: steps[1] / t for n, t in steps.items() if n > 1}
    return with_sync(model, efficiencies, 1, batch)


def held_out(model: ScalingModel, steps: dict[int, float], batch: int) -> HeldOut | None:
    """Fitted on the counts below the largest (at least one above 1), the largest predicted."""
    top = max(steps)
    below = {n: t for n, t in steps.items() if n < top}
    if len(below) < 2:
        return None
    predicted = _fitted(model, below, batch).step_s(top, batch)
    return HeldOut(top, batch, tuple(sorted(n for n in below if n > 1)), predicted, steps[top])


def fit_every_count(fits: list[Fit], runs: pd.DataFrame) -> list[tuple[Fit, HeldOut | None]]:
    """Each fit with its synchronisation term fitted to every count its runs measured, validated
    again, and its leave-last-out check (None where fewer than two counts above one)."""
    out = []
    for one in fits:
        found = measured_steps(one.validation)
        if found is None:
            out.append((one, None))
            continue
        batch, steps = found
        model = _fitted(one.model, steps, batch)
        mine = runs[(hardware_key(runs) == one.hardware) & (runs["workload"] == one.workload)]
        refit = replace(
            one, model=model, validation=validate(model, mine), own_terms=one.validation
        )
        out.append((refit, held_out(one.model, steps, batch)))
    return out


def format_held_out(one: Fit, check: HeldOut | None) -> list[str]:
    """What the synchronisation term was fitted to, and the leave-last-out check on the user's
    runs where there is one."""
    sync = one.model.overheads.sync
    if not sync.fitted_on:
        return []
    counts = ", ".join(str(n) for n in sync.fitted_on)
    lines = [
        f"   synchronisation fitted at {counts} workers: the validation above is of the counts "
        "it was fitted to"
    ]
    lines += _own_terms(one, sync.fitted_on)
    if check is not None:
        below = ", ".join(str(n) for n in check.fitted_on)
        lines.append(
            f"   leave-last-out on these runs: fitted at {below} workers, {check.workers} "
            f"predicted {check.predicted_s * 1e3:.3f} ms vs measured "
            f"{check.measured_s * 1e3:.3f} ms (error {check.error_pct:+.1f} %, "
            f"batch {check.batch})"
        )
    return lines


def _own_terms(one: Fit, counts: tuple[int, ...]) -> list[str]:
    """The prediction of the model's own terms (compute, communication, stragglers: nothing
    fitted to these runs' multi-worker steps) at each count the term was fitted to."""
    own = one.own_terms
    if own is None or own.empty:
        return []
    rows = own[own["workers"].isin(counts) & ~own["oversubscribed"].astype(bool)]
    return [
        f"   before that fit, its own terms: workers {r.workers} batch {r.per_worker_batch} "
        f"predicted {r.predicted_step_s * 1e3:.3f} ms vs measured {r.measured_step_s * 1e3:.3f} "
        f"ms (error {r.error_pct:+.1f} %)"
        for r in rows.itertuples()
    ]
