"""The overhead benchmark's statistics: block pairing, the median pair ratio and its bootstrap
interval on synthetic series of known ratio (no timing)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.bench.overhead_stats import Block, block_order, median_interval, pair_ratios, summarize


def synthetic_blocks(ratio: float, pairs: int, seed: int, drift: float = 3.0) -> list[Block]:
    """Blocks whose suite throughput is ``ratio`` x bare's, under a load that swings the
    speed of both by up to ``drift`` x between pairs and adds 2 % noise to every block."""
    rng = np.random.default_rng(seed)
    blocks = []
    for pair in range(pairs):
        slow = 1.0 + (drift - 1.0) * rng.random()  # the load of this pair
        for side in block_order(pair):
            base = 0.2 * slow * (1.0 + 0.02 * rng.standard_normal())
            wall = base / ratio if side == "suite" else base
            blocks.append(Block(side, wall, cpu_s=0.4 if side == "bare" else 0.5))
    return blocks


def test_block_order_alternates_which_side_runs_first() -> None:
    assert [block_order(p) for p in range(3)] == [
        ("bare", "suite"),
        ("suite", "bare"),
        ("bare", "suite"),
    ]


def test_pair_ratio_is_bare_time_over_suite_time_in_either_order() -> None:
    blocks = [Block("bare", 1.0, 0), Block("suite", 2.0, 0)]
    blocks += [Block("suite", 4.0, 0), Block("bare", 3.0, 0)]
    assert pair_ratios(blocks).tolist() == [0.5, 0.75]


@pytest.mark.parametrize(
    "blocks",
    [
        [Block("bare", 1.0, 0)],
        [Block("bare", 1.0, 0), Block("bare", 1.0, 0)],
        [],
    ],
)
def test_pairs_need_one_block_of_each_side(blocks: list[Block]) -> None:
    with pytest.raises(ValueError):
        pair_ratios(blocks)


def test_known_ratio_is_recovered_under_a_drifting_load() -> None:
    s = summarize(synthetic_blocks(0.96, pairs=200, seed=1), steps_per_block=50)
    assert s.pairs == 200
    assert s.low < 0.96 < s.high
    assert abs(s.median_ratio - 0.96) < 0.005
    assert s.high - s.low < 0.01  # a 3x swing of the load cancels in the pairs
    assert s.bare_cpu_s == pytest.approx(0.4 / 50)
    assert s.suite_cpu_s == pytest.approx(0.5 / 50)


def test_unpaired_blocks_under_the_same_load_do_not_recover_it() -> None:
    """The point of pairing: the ratio of the sides' medians across pairs is far noisier."""
    blocks = synthetic_blocks(0.96, pairs=200, seed=1)
    bare = np.array([b.wall_s for b in blocks if b.side == "bare"])
    suite = np.array([b.wall_s for b in blocks if b.side == "suite"])
    _, low, high = median_interval(np.median(bare) / suite)
    assert high - low > 0.1


def test_bootstrap_interval_is_fixed_by_its_seed() -> None:
    values = np.random.default_rng(2).normal(1.0, 0.05, 80)
    assert median_interval(values, seed=5) == median_interval(values, seed=5)
    median, low, high = median_interval(values, seed=5)
    assert low <= median <= high


def test_no_values_is_an_error() -> None:
    with pytest.raises(ValueError):
        median_interval(np.array([]))
