"""Each rank's own step times, for "which rank is slow": steps_by_rank.csv.

steps.csv keeps the slowest rank's numbers; here every rank keeps its own for a bounded, evenly
spaced sample of timed steps (``timing.max_rank_steps``), gathered once at the end of the run
(nothing is exchanged while training). Where communication is sampled (DDP's reducer timers,
every ``timing.comm_every``-th step), only sampled steps are kept, so that every row has all
four parts of its step:

* ``data_wait_s``: the wait for the batch;
* ``compute_s``: the rank's own work (step minus data wait minus ``comm_wait_s``);
* ``comm_wait_s``: how long the rank waited for communication after its last gradient: the
  exposed all-reduce (the step's least ``comm_wait_s`` over ranks) plus ``peer_wait_s``, the
  wait for slower ranks. The slow rank waits least: the others wait for it.
"""

from __future__ import annotations

from typing import Any

import torch

from dpsuite.measure.comm_probe import CommProbe
from dpsuite.measure.data_wait import DataWaitProbe
from dpsuite.measure.probes import Probe
from dpsuite.measure.step_timer import StepTimeProbe, sample_indices

PARTS = ("step_time_s", "data_wait_s", "comm_s", "comm_wait_s")


class RankTimelineProbe(Probe):
    """Every rank's own step time, data wait and communication of up to ``limit`` steps."""

    def __init__(
        self,
        step_probe: StepTimeProbe,
        data_wait: DataWaitProbe,
        comm: CommProbe | None,
        limit: int,
    ) -> None:
        self.step_probe, self.data_wait, self.comm, self.limit = step_probe, data_wait, comm, limit

    def kept_steps(self) -> list[int]:
        """The timed steps recorded (the same on every rank: the steps sampled are)."""
        steps = self.step_probe.timer.steps
        if self.comm is not None:  # every row with its communication (sampled steps)
            steps = [s for s in steps if s in self.comm.samples]
        return [steps[i] for i in sample_indices(len(steps), self.limit)] if self.limit else []

    def own_parts(self, steps: list[int]) -> list[list[float]]:
        """This rank's PARTS of each step in ``steps``."""
        timer = self.step_probe.timer
        duration = dict(zip(timer.steps, timer.durations, strict=True))
        rows = []
        for step in steps:
            comm = tail = float("nan")
            if self.comm is not None and step in self.comm.samples:
                waited = self.comm.counter.steps[step].blocking_s
                comm, tail = (x + waited for x in self.comm.samples[step])
            rows.append([duration[step], self.data_wait.waits.get(step, 0.0), comm, tail])
        return rows

    def rank_steps(self) -> list[dict[str, Any]]:
        from dpsuite.runtime import distributed

        steps = self.kept_steps()
        if not distributed.active() or not steps:
            return []
        import torch.distributed as dist

        mine = torch.tensor(self.own_parts(steps), dtype=torch.float64)
        mine = mine.to(self.step_probe.device)
        gathered = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
        dist.all_gather(gathered, mine)
        return timeline_rows(steps, [g.cpu().tolist() for g in gathered])


def timeline_rows(steps: list[int], by_rank: list[list[list[float]]]) -> list[dict[str, Any]]:
    """steps_by_rank.csv rows from each rank's PARTS by step, with compute and peer wait."""
    rows = []
    for i, step in enumerate(steps):
        parts = [dict(zip(PARTS, ranks_rows[i], strict=True)) for ranks_rows in by_rank]
        tails = [p["comm_wait_s"] for p in parts if p["comm_wait_s"] == p["comm_wait_s"]]
        least = min(tails) if tails else None
        for rank, p in enumerate(parts):
            tail = p["comm_wait_s"]
            sampled = tail == tail
            rows.append(
                {
                    "step": step,
                    "rank": rank,
                    **p,
                    "compute_s": (
                        max(0.0, p["step_time_s"] - p["data_wait_s"] - tail) if sampled else None
                    ),
                    "peer_wait_s": tail - least if sampled and least is not None else None,
                }
            )
    return rows
