"""Where this process sits in a job: the ranks torchrun, submitit or srun gave it, read from
the environment alone (no torch), so that commands that only check or show a config stay quick."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Ranks:
    """Where this process sits in the job."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int


def ranks_from_env() -> Ranks | None:
    """The ranks given by torchrun, submitit or srun, or None when we must start them ourselves."""
    env = os.environ
    if "RANK" in env and "WORLD_SIZE" in env:
        world = int(env["WORLD_SIZE"])
        return Ranks(
            int(env["RANK"]),
            world,
            int(env.get("LOCAL_RANK", 0)),
            int(env.get("LOCAL_WORLD_SIZE", world)),
        )
    # A submitit job (SLURM or local) with several tasks: one task per rank.
    if env.get("SUBMITIT_EXECUTOR") and _submitit_tasks() > 1:
        import submitit

        job = submitit.JobEnvironment()
        return Ranks(job.global_rank, job.num_tasks, job.local_rank, job.num_tasks // job.num_nodes)
    # srun with several tasks; a single-task allocation still spawns its own workers.
    if int(env.get("SLURM_NTASKS", "1")) > 1 and "SLURM_PROCID" in env:
        return Ranks(
            int(env["SLURM_PROCID"]),
            int(env["SLURM_NTASKS"]),
            int(env.get("SLURM_LOCALID", 0)),
            slurm_tasks_on_node(env),
        )
    return None


def _submitit_tasks() -> int:
    env = os.environ
    if env.get("SUBMITIT_EXECUTOR") == "local":
        return int(env.get("SUBMITIT_LOCAL_NTASKS", "1"))
    return int(env.get("SLURM_NTASKS", "1"))


def slurm_tasks_on_node(env: Mapping[str, str]) -> int:
    """How many tasks of this SLURM step run on this node (1 outside SLURM).

    ``srun -n2`` sets SLURM_STEP_TASKS_PER_NODE (and the allocation SLURM_TASKS_PER_NODE), not
    SLURM_NTASKS_PER_NODE, which only ``--ntasks-per-node`` sets. Their format lists a count
    per node, runs compressed: ``2(x3),1`` is 2, 2, 2, 1; SLURM_NODEID says which is ours.
    """
    for key in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE"):
        counts = _per_node_counts(env.get(key, ""))
        if counts:
            node = int(env.get("SLURM_NODEID", "0"))
            return counts[node] if node < len(counts) else counts[-1]
    return 1


def _per_node_counts(text: str) -> list[int]:
    counts: list[int] = []
    for part in text.split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if match is None:
            return []
        counts += [int(match[1])] * int(match[2] or 1)
    return counts
