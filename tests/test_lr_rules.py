import math

import pytest

from dpsuite.optim.lr_rules import RULES, LRPlan, exponent_of, peak_lr, schedule_factor


def plan(rule: str, batch: int, **kw) -> LRPlan:
    args = dict(
        rule=rule,
        base_lr=0.1,
        base_batch=32,
        global_batch=batch,
        steps_per_epoch=100,
        total_steps=1000,
        schedule="constant",
    )
    args.update(kw)
    return LRPlan(**args)


@pytest.mark.parametrize(
    "rule,batch,expected",
    [
        ("naive", 1024, 0.1),
        ("linear", 1024, 3.2),
        ("linear_warmup", 256, 0.8),
        ("sqrt", 512, 0.4),
        ("sqrt", 32, 0.1),
        ("linear", 16, 0.05),
    ],
)
def test_peak_lr(rule, batch, expected):
    assert peak_lr(rule, 0.1, 32, batch) == pytest.approx(expected)


def test_unknown_rule():
    with pytest.raises(ValueError, match="unknown lr_rule"):
        peak_lr("cubic", 0.1, 32, 64)


def test_linear_warmup_ramps_per_iteration_from_base_lr():
    p = plan("linear_warmup", 256, warmup_epochs=2)  # 200 warmup steps, 0.1 -> 0.8
    assert p.warmup_steps == 200
    assert p.lr_at(0) == pytest.approx(0.1)
    assert p.lr_at(100) == pytest.approx(0.45)
    assert p.lr_at(199) == pytest.approx(0.1 + 0.7 * 199 / 200)
    assert p.lr_at(200) == pytest.approx(0.8)
    assert p.lr_at(999) == pytest.approx(0.8)
    # strictly increasing, by a constant amount every iteration
    deltas = {round(p.lr_at(s + 1) - p.lr_at(s), 12) for s in range(199)}
    assert deltas == {round(0.7 / 200, 12)}


def test_warmup_only_goes_up():
    """Below the base batch the peak is under base_lr: no warmup down to it (it used to ramp
    0.1 -> 0.025 for cifar_resnet at batch 32, base batch 128)."""
    p = plan("linear_warmup", 8, warmup_epochs=1)  # peak 0.025
    assert p.warmup_steps == 0 and p.lr_at(0) == pytest.approx(0.025)


@pytest.mark.parametrize("name", list(RULES))
def test_every_rule_reaches_its_stated_peak_after_its_warmup(name):
    """The registry's contract: peak = base_lr x k ** exponent, reached after warmup from base_lr
    for a rule that warms up, at once otherwise, and never exceeded."""
    p = plan(name, 512, warmup_epochs=1, exponent=0.75)  # the exponent: the power rule's
    peak = 0.1 * 16 ** exponent_of(name, 0.75)
    assert p.peak == pytest.approx(peak)
    assert p.warmup_steps == (100 if RULES[name].warms_up and peak > 0.1 else 0)
    assert p.lr_at(0) == pytest.approx(0.1 if p.warmup_steps else peak)
    assert p.lr_at(p.warmup_steps) == pytest.approx(peak)
    assert max(p.lr_at(s) for s in range(1000)) == pytest.approx(peak)


@pytest.mark.parametrize("rule", list(RULES))
def test_at_the_base_batch_every_rule_is_the_small_batch_recipe(rule):
    recipe = plan("naive", 32, schedule="cosine")
    p = plan(rule, 32, warmup_epochs=1, schedule="cosine", exponent=0.75)  # power's exponent
    assert [p.lr_at(s) for s in range(0, 1000, 50)] == [recipe.lr_at(s) for s in range(0, 1000, 50)]


@pytest.mark.parametrize("exponent,rule", [(0.0, "naive"), (0.5, "sqrt"), (1.0, "linear_warmup")])
def test_the_power_rule_spans_the_rules(exponent, rule):
    assert peak_lr("power", 0.1, 32, 512, exponent) == pytest.approx(peak_lr(rule, 0.1, 32, 512))
    p = plan("power", 512, warmup_epochs=1, exponent=exponent)
    assert p.warmup_steps == (100 if exponent > 0 else 0)


def test_other_rules_have_no_warmup():
    for rule in ("naive", "linear", "sqrt"):
        assert plan(rule, 256, warmup_epochs=2).warmup_steps == 0


def test_cosine_after_warmup():
    p = plan("linear_warmup", 64, warmup_epochs=1, schedule="cosine")  # peak 0.2
    assert p.lr_at(100) == pytest.approx(0.2)
    assert p.lr_at(550) == pytest.approx(0.1)  # half-way through the 900 decay steps
    assert p.lr_at(1000) == pytest.approx(0.0, abs=1e-12)


def test_cosine_without_warmup():
    p = plan("sqrt", 128, schedule="cosine")  # peak 0.2
    assert p.lr_at(0) == pytest.approx(0.2)
    assert p.lr_at(250) == pytest.approx(0.2 * 0.5 * (1 + math.cos(math.pi / 4)))


def test_step_schedule():
    p = plan("linear", 64, schedule="step", milestones=(0.5, 0.75), gamma=0.1)
    assert p.lr_at(499) == pytest.approx(0.2)
    assert p.lr_at(500) == pytest.approx(0.02)
    assert p.lr_at(750) == pytest.approx(0.002)


def test_schedule_factor_bounds():
    assert schedule_factor(-1, "cosine") == 1.0
    assert schedule_factor(2, "cosine") == pytest.approx(0.0)
    with pytest.raises(ValueError):
        schedule_factor(0.5, "exponential")


def test_lars_rule_warms_up_then_decays_polynomially():
    p = plan("lars", 512, warmup_epochs=1, schedule="poly", power=2.0)  # peak 0.1 * 4
    assert p.warmup_steps == 100
    assert p.lr_at(0) == pytest.approx(0.1)
    assert p.lr_at(100) == pytest.approx(0.4)
    assert p.lr_at(550) == pytest.approx(0.4 * 0.25)  # (1 - 0.5) ** 2
    assert p.lr_at(1000) == pytest.approx(0.0)


def test_an_absolute_peak_lr_is_the_same_at_every_batch_and_warms_up_from_the_base_lr_only():
    assert peak_lr("power", 0.1, 32, 512, 0.5, absolute=0.4) == 0.4
    assert peak_lr("power", 0.1, 32, 32, 0.5, absolute=0.05) == 0.05

    def plan(peak: float) -> LRPlan:
        return LRPlan(
            "power", 0.1, 32, 64, steps_per_epoch=10, total_steps=100, warmup_epochs=1.0,
            schedule="constant", exponent=0.5, absolute_peak=peak,
        )  # fmt: skip

    up = plan(0.4)  # above the base LR: 10 steps from 0.1 to 0.4, 0.03 a step
    assert up.warmup_steps == 10 and up.lr_at(0) == 0.1 and up.lr_at(5) == pytest.approx(0.25)
    assert up.lr_at(10) == 0.4
    below = plan(0.05)  # below it: no warmup, the peak from the first step
    assert below.warmup_steps == 0 and below.lr_at(0) == 0.05
