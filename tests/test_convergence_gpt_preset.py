"""The language-model convergence study (`dpsuite sweep convergence_gpt`): its parts, the
steps-to-target recipe scored by eval loss, and the LR oracle's sqrt(2) grid with warmup as its
own axis. Planning only: nothing runs."""

from __future__ import annotations

import math

import pytest

from dpsuite.sweep.runner import planned

SQRT2 = math.sqrt(2)


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    os_cwd = tmp_path_factory.mktemp("plan")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(os_cwd)
        yield {
            s.label: list(s.specs.values()) for s in planned("convergence_gpt", [], writing=False)
        }
        assert not (os_cwd / "results").exists(), "planning alone creates nothing"


def test_the_parts_and_their_sizes(parts):
    assert {k: len(v) for k, v in parts.items()} == {
        "convergence_gpt_budget": 6 * 4 * 2,
        "convergence_gpt_target_baseline": 3,  # batch 4: every rule is the recipe
        "convergence_gpt_target_small": 1 * 4 * 2,  # batch 8, evaluated as its oracle runs
        "convergence_gpt_target": 4 * 4 * 2,
        "convergence_gpt_oracle_small": 2 * 4 * 2,
        "convergence_gpt_oracle_large": 4 * 5 * 2,
        "convergence_gpt_oracle_warmup": 4 * 2 * 2,
    }
    batches = {s.global_batch for specs in parts.values() for s in specs}
    assert sorted(batches) == [4 * 2**k for k in range(6)]  # >= 5 global batches
    assert {s.cfg.workload.name for specs in parts.values() for s in specs} == {"tiny_gpt_loss"}


def test_steps_to_target_are_counted_on_the_eval_loss(parts):
    target = [s for k, specs in parts.items() if k != "convergence_gpt_budget" for s in specs]
    assert {
        (s.target_metric, s.cfg.workload.target_loss, s.cfg.train.stop_at_target) for s in target
    } == {("eval_loss", 1.1, True)}
    assert {s.target_fields()["target_acc"] for s in target} == {None}
    assert {(s.cfg.workload.base_lr, s.cfg.workload.base_batch) for s in target} == {(0.025, 4)}
    assert {s.cfg.optimizer.momentum for s in target} == {0.9}  # only the LR is tuned
    # every setting at one batch is evaluated as often: 32 an epoch at 4 and 8, else 16
    evals = {(s.global_batch, s.cfg.train.evals_per_epoch) for s in target}
    assert evals == {(b, 32 if b <= 8 else 16) for b in (4, 8, 16, 32, 64, 128)}


def test_the_oracle_brackets_each_batch_on_a_sqrt2_grid_with_warmup_as_an_axis(parts):
    grid = [s for k, specs in parts.items() if "oracle" in k for s in specs]
    by_batch: dict[int, set[float]] = {}
    for s in grid:
        by_batch.setdefault(s.global_batch, set()).add(s.cfg.lr_rule.peak_lr)
    for batch, lrs in by_batch.items():
        # with the base LR 0.025: the baseline's runs at 4, the naive rule's above
        lrs = sorted(lrs | {0.025})
        steps = [b / a for a, b in zip(lrs, lrs[1:], strict=False)]
        assert all(abs(r - SQRT2) < 0.03 for r in steps), (batch, lrs)
        assert len(lrs) >= 5, (batch, lrs)
    warm = {
        (s.global_batch, s.cfg.lr_rule.peak_lr): s.cfg.lr_rule.warmup_epochs
        for s in parts["convergence_gpt_oracle_warmup"]
    }
    assert set(warm.values()) == {1.0}
    cold = {
        (s.global_batch, s.cfg.lr_rule.peak_lr)
        for k in ("convergence_gpt_oracle_small", "convergence_gpt_oracle_large")
        for s in parts[k]
        if s.cfg.lr_rule.warmup_epochs == 0
    }
    assert set(warm) <= cold  # every warmup setting has its no-warmup twin at the same peak LR
    assert all(
        s.cfg.lr_rule.warmup_epochs == 0
        for k in ("convergence_gpt_oracle_small", "convergence_gpt_oracle_large")
        for s in parts[k]
    )
