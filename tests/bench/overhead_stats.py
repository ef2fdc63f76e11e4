"""Statistics of an interleaved overhead measurement: adjacent blocks paired, their ratio,
the median ratio and a bootstrap interval over the pairs.

Blocks run in pairs of one bare block and one suite block of the same number of steps, the
order alternating (bare-suite, suite-bare, ...). A pair's ratio is bare time / suite time:
the suite's throughput over the bare loop's. Load that drifts over seconds slows both blocks
of a pair alike and cancels in the ratio; the alternating order cancels a drift within pairs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpsuite.analysis.report import stats

BOOTSTRAP_RESAMPLES = 4000


@dataclass(frozen=True)
class Block:
    """One block of steps: which side ran it, its wall time and the CPU time of all ranks."""

    side: str  # "bare" or "suite"
    wall_s: float
    cpu_s: float


@dataclass(frozen=True)
class Summary:
    median_ratio: float
    low: float  # the 95 % interval of the median ratio
    high: float
    pairs: int
    bare_cpu_s: float  # CPU time of all ranks per step, over all of that side's blocks
    suite_cpu_s: float


def block_order(pair: int) -> tuple[str, str]:
    """The two sides of pair ``pair`` in the order they run."""
    return ("bare", "suite") if pair % 2 == 0 else ("suite", "bare")


def pair_ratios(blocks: list[Block]) -> np.ndarray:
    """suite throughput / bare throughput of every adjacent pair (bare time / suite time)."""
    if len(blocks) < 2 or len(blocks) % 2:
        raise ValueError(f"need an even number (>= 2) of blocks, got {len(blocks)}")
    ratios = []
    for first, second in zip(blocks[::2], blocks[1::2], strict=True):
        sides = {first.side: first, second.side: second}
        if set(sides) != {"bare", "suite"}:
            raise ValueError(f"a pair must hold one bare and one suite block: {first}, {second}")
        ratios.append(sides["bare"].wall_s / sides["suite"].wall_s)
    return np.asarray(ratios)


def median_interval(
    values: np.ndarray, seed: int = 0, resamples: int = BOOTSTRAP_RESAMPLES
) -> tuple[float, float, float]:
    """The median of ``values`` and its percentile-bootstrap 95 % interval (fixed seed), as
    the reports compute a repeated point's (`dpsuite.analysis.report.stats`)."""
    if values.size == 0:
        raise ValueError("no values")
    low, high = stats.median_ci(values, seed, resamples)
    return float(np.median(values)), low, high


def summarize(blocks: list[Block], steps_per_block: int, seed: int = 0) -> Summary:
    ratios = pair_ratios(blocks)
    median, low, high = median_interval(ratios, seed)

    def cpu(side: str) -> float:
        cpu = [b.cpu_s for b in blocks if b.side == side]
        return sum(cpu) / (len(cpu) * steps_per_block)

    return Summary(median, low, high, ratios.size, cpu("bare"), cpu("suite"))
