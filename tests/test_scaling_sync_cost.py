"""Per-step synchronisation that grows with the collective count and N (NCCL's latency per
collective, ring linear and tree logarithmic in N), fitted to measured efficiencies."""

from dataclasses import replace

import pytest

from dpsuite.analysis.scaling import allreduce_cost
from dpsuite.analysis.scaling.allreduce_cost import Library
from dpsuite.analysis.scaling.compute import ComputeModel
from dpsuite.analysis.scaling.model import MIB, Overheads, ScalingModel
from dpsuite.analysis.scaling.sync_cost import (
    SyncCost,
    collective_latency_s,
    fit_sync,
    with_sync,
)
from dpsuite.analysis.scaling.term_shares import step_terms
from dpsuite.analysis.scaling.topology import Link, Topology

DGX = Topology(Link(1e-6, 150e9, "nvlink"), Link(5e-6, 25e9, "net"), gpus_per_node=8)
MODEL = ScalingModel(
    DGX,
    ComputeModel(0.01, 1e-3),
    grad_bytes=400 * MIB,
    bucket_bytes=25 * MIB,
    measured=("compute",),
)


def test_nccl_ring_latency_grows_linearly_and_tree_logarithmically():
    ring = Library(only=("ring",))
    one_node = [allreduce_cost.latency_s(DGX, 1e3, n, ring) for n in (2, 4, 8)]
    steps = [b - a for a, b in zip(one_node, one_node[1:], strict=False)]
    assert steps[1] == pytest.approx(2 * steps[0])  # 2(N-1) hops: 4 more hops, then 8 more
    tree = Library(only=("tree",))
    nodes = [allreduce_cost.latency_s(DGX, 1e3, 8 * m, tree) for m in (2, 4, 8, 16)]
    rises = [b - a for a, b in zip(nodes, nodes[1:], strict=False)]
    assert rises[0] > 0  # log2 m: the same rise each doubling of the nodes
    assert rises[1] == pytest.approx(rises[0]) and rises[2] == pytest.approx(rises[0])
    assert allreduce_cost.latency_s(DGX, 1e3, 1, ring) == 0.0


def test_gloo_latency_is_its_alpha_terms():
    lib = Library(backend="gloo")
    top = Topology(Link(20e-6, 1e9))
    assert allreduce_cost.latency_s(top, 1e6, 4, lib) == pytest.approx(2 * 3 * 20e-6)


def test_the_term_grows_with_the_collective_count():
    few = collective_latency_s(MODEL, 8)
    many = collective_latency_s(replace(MODEL, bucket_bytes=5 * MIB), 8)
    assert many > 4 * few > 0


@pytest.mark.parametrize("baseline", [1, 2])
def test_the_fit_recovers_a_known_term(baseline):
    truth = SyncCost(fixed_s=2e-3, scale=3.0, fitted_on=(2,))
    true_model = replace(MODEL, overheads=Overheads(sync=truth))
    counts = [n for n in (2, 4, 8, 16) if n > baseline]
    efficiencies = {n: true_model.efficiency(n, 32, baseline) for n in counts}
    fitted = with_sync(MODEL, efficiencies, baseline, 32)
    assert fitted.overheads.sync.fixed_s == pytest.approx(2e-3, rel=1e-6)
    assert fitted.overheads.sync.scale == pytest.approx(3.0, rel=1e-6)
    assert fitted.overheads.sync.fitted_on == tuple(counts)
    assert fitted.efficiency(64, 32, baseline) == pytest.approx(
        true_model.efficiency(64, 32, baseline)
    )
    assert "synchronisation" in fitted.measured and fitted.kind() == "estimate"


def test_one_count_is_all_fixed_and_nothing_is_negative():
    one = fit_sync({1: 1.0, 4: 1.0}, {1: 0.0, 4: 1e-4}, {4: 0.8}, 1)
    assert one.fixed_s == pytest.approx(0.25) and one.scale == 0.0
    # Better than the model at every count: no negative cost, the term is 0.
    better = fit_sync({1: 1.0, 2: 1.0, 4: 1.0}, {1: 0, 2: 1e-4, 4: 3e-4}, {2: 1.1, 4: 1.2}, 1)
    assert better.fixed_s == 0.0 and better.scale == 0.0
    assert fit_sync({1: 1.0}, {1: 0.0}, {}, 1) == SyncCost()


def test_the_printout_names_the_term_and_its_source():
    fitted = with_sync(MODEL, {2: 0.95, 4: 0.92}, 1, 32)
    terms = {t.name: t for t in step_terms(fitted, 8, 32)}
    sync = terms["synchronisation per collective"]
    assert sync.seconds > 0
    assert sync.source.startswith("measured: fitted at 2, 4 workers")
    assert "NCCL's latency of 16 collectives" in sync.source
    assert "synchronisation per collective" not in {t.name for t in step_terms(MODEL, 8, 32)}
