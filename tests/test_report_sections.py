"""The contract of a report's sections: each plot a section draws is named in `build.PLOT_NAMES`
(derived from the sections), each headline candidate is one its section declares (with its rank),
and a report rewritten into its directory removes the PNGs of plots it no longer draws."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from dpsuite.analysis.report import build, data, headline, studies
from tests import report_trees as trees


def test_plot_names_are_the_sections_plots():
    declared = [name for topic in build.SECTIONS for name in topic.PLOTS]
    assert sorted(declared) == sorted(build.PLOT_NAMES)
    assert len(set(declared)) == len(declared), "two sections declare one plot name"


def test_each_section_is_one_topic():
    topics = [topic.TOPIC for topic in build.SECTIONS]
    assert len(set(topics)) == len(topics), topics


def written_tree(root: Path) -> Path:
    trees.write_scaling(root)
    trees.write_comm_bench(root)
    trees.write_convergence(root)
    trees.write_target_study(root)
    trees.write_sync(root)
    return root


@pytest.fixture(scope="module")
def full_tree(tmp_path_factory) -> Path:
    return written_tree(tmp_path_factory.mktemp("full"))


def plot_stem(name: str) -> str:
    """The PLOT_NAMES entry a PNG's stem comes from: the name, or the name and "-<study>"."""
    return next(p for p in sorted(build.PLOT_NAMES, key=len, reverse=True) if name.startswith(p))


def test_every_plot_of_every_section_is_declared(full_tree):
    context = studies.context(data.load_tree(full_tree))
    for topic in build.SECTIONS:
        part = topic.section(context)
        for plot in part.plots:
            assert re.fullmatch(rf"({'|'.join(build.PLOT_NAMES)})(-[a-z0-9-]+)?", plot.name), (
                f"{topic.__name__} draws {plot.name!r}, not named in PLOT_NAMES"
            )
        assert set(part.headline) <= set(topic.HEADLINE), topic.__name__


def test_a_report_removes_the_plots_it_no_longer_draws(full_tree, tmp_path):
    out = tmp_path / "rep"
    first = {p.name for p in build.build_report(full_tree, out).out.glob("*.png")}
    assert {"throughput.png", "allreduce_bandwidth.png"} <= first
    only_convergence = tmp_path / "conv"
    trees.write_convergence(only_convergence)
    second = {p.name for p in build.build_report(only_convergence, out).out.glob("*.png")}
    assert "throughput.png" not in second and "allreduce_bandwidth.png" not in second
    assert second and all(plot_stem(Path(name).stem) for name in second)


def test_headline_refuses_a_candidate_without_priority():
    with pytest.raises(ValueError, match="without a priority"):
        headline.choose({"made_up": "A sentence."}, pd.DataFrame(), build.PRIORITY)


def test_the_headline_order_is_the_sections_ranks():
    """The order docs/reports.md gives ("The headline"); a new section's candidates go between."""
    documented = [
        "batch_limits",
        "warmup_extension",
        "scaling_limit",
        "knee_and_prediction",
        "time_to_target",
        "oracle_efficiency",
        "bandwidth",
    ]
    assert [name for name in build.PRIORITY if name in documented] == documented


def test_two_sections_cannot_give_one_rank_or_one_name():
    one, other = SimpleNamespace(HEADLINE={"a": 10}), SimpleNamespace(HEADLINE={"b": 10})
    with pytest.raises(ValueError, match="share a name or a rank"):
        headline.priority([one, other])
    with pytest.raises(ValueError, match="share a name or a rank"):
        headline.priority([one, SimpleNamespace(HEADLINE={"a": 20})])
