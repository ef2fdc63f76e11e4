"""The headline of a report: at most five sentences a reader acts on, chosen from the candidates
its sections computed (each section names its candidates, see `section.Section.candidate`).

In order of priority (`PRIORITY`), as many as fit: the largest global batch each LR rule takes
within 1 point of the small-batch accuracy; how far warmup extends linear scaling; the best and
worst scaling efficiency at the largest worker count not oversubscribed and what limits them;
the knee of steps to target beside the critical batch the noise scale predicts; the fastest way
to the target on this machine; each rule's efficiency against the LR oracle at the largest batch
the oracle reached; the all-reduce bus bandwidth. Failed runs always take the last place. The
findings below the headline hold the details.
"""

from __future__ import annotations

import pandas as pd

from dpsuite.analysis.report.render import HEADLINE_MAX

# The suite's two questions first (how far the batch grows, how far it scales and why), then
# the deeper convergence answers; five at most, so the later ones give way.
PRIORITY = (
    "batch_limits",  # convergence
    "warmup_extension",  # convergence
    "scaling_limit",  # scaling
    "knee_and_prediction",  # critical batch
    "time_to_target",  # time to target
    "oracle_efficiency",  # steps to target
    "bandwidth",  # all-reduce
)


def choose(candidates: dict[str, str], runs: pd.DataFrame) -> list[str]:
    """The sentences, by priority; a count of the failed runs always takes the last place."""
    unknown = set(candidates) - set(PRIORITY)
    if unknown:
        raise ValueError(f"headline candidates without a priority: {sorted(unknown)}")
    chosen = [candidates[name] for name in PRIORITY if candidates.get(name)]
    failed = int((runs["status"] == "failed").sum()) if not runs.empty else 0
    if failed:
        chosen = chosen[: HEADLINE_MAX - 1]
        chosen.append(f"{failed} of {len(runs)} runs failed; they are listed under Failed runs.")
    return chosen[:HEADLINE_MAX]
