"""Registry traits: each LR rule and strategy carries its own, run.json records them, and the
reports take them from the runs (older results: from the registry)."""

from __future__ import annotations

import math

from dpsuite.analysis.report import data, plots
from dpsuite.analysis.report.sections import sync
from dpsuite.conf.compose import compose_config
from dpsuite.conf.run_spec import resolve
from dpsuite.optim.lr_rules import RULES
from dpsuite.sync import STRATEGIES
from tests.conftest import SMALL


def test_run_json_records_the_rule_and_strategy_traits(tmp_path):
    overrides = [*SMALL, "lr_rule=lars", "sync=local_sgd", "workers=2", f"results_dir={tmp_path}"]
    summary = resolve(compose_config(overrides)).summary()
    assert summary["lr_rule_own_recipe"] is True
    assert summary["lr_rule_order"] == list(RULES).index("lars")
    assert summary["sync_order"] == list(STRATEGIES).index("local_sgd")


def test_the_strategies_table_takes_the_recorded_order_else_the_registrys():
    assert sync.strategy_order("powersgd", 0.0) == 0  # as the run recorded it
    assert sync.strategy_order("powersgd", math.nan) == list(STRATEGIES).index("powersgd")
    assert sync.strategy_order("unknown") == len(STRATEGIES)


def test_the_reports_rule_lists_are_the_registrys():
    assert data.OWN_RECIPE_RULES == ("lars",)  # the one rule with its own recipe
    assert data.rule_order(["power", "unknown", "sqrt", "naive"]) == [
        "naive",
        "sqrt",
        "power",
        "unknown",
    ]
    assert plots.rule_color("lars") == RULES["lars"].color
    assert plots.rule_color("power") == "#7f7f7f"  # no colour of its own
