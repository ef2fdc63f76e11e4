"""The scaling model's parts: topology, all-reduce algorithms, bucket overlap, fits, profiles."""

import math

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from suite.analysis.scaling import allreduce_cost, overlap
from suite.analysis.scaling.compute import ComputeModel, fit_compute_model, from_flops
from suite.analysis.scaling.fit import fit_inter_link, fit_intra_link, fit_topology
from suite.analysis.scaling.model import MIB, ScalingModel
from suite.analysis.scaling.profiles import load_profile, profile_names
from suite.analysis.scaling.topology import Link, Topology
from suite.errors import UserError

NVLINK = Link(3e-6, 150e9)
IB = Link(10e-6, 50e9)
DGX = Topology(NVLINK, IB, gpus_per_node=8)


# ---- topology and algorithms -------------------------------------------------------------------


def test_ranks_fill_nodes_in_order():
    assert [DGX.nodes(n) for n in (1, 8, 9, 16, 4096)] == [1, 1, 2, 2, 512]
    assert [DGX.ranks_per_node(n) for n in (2, 8, 16)] == [2, 8, 8]
    alone = Topology(NVLINK)  # nothing known about a network: one node of any size
    assert alone.nodes(4096) == 1 and alone.ranks_per_node(4096) == 4096


def test_ring_formula_counts_inter_node_steps_and_the_slowest_link():
    # 16 ranks on 2 nodes: 30 steps, 2 of them across the network; bandwidth of the NIC.
    size = 100e6
    expected = 28 * 3e-6 + 2 * 10e-6 + 2 * 15 / 16 * size / 50e9
    assert allreduce_cost.ring_s(DGX, size, 16) == pytest.approx(expected)
    # inside one node: NVLink only
    assert allreduce_cost.ring_s(DGX, size, 8) == pytest.approx(
        14 * 3e-6 + 2 * 7 / 8 * size / 150e9
    )


def test_tree_latency_is_log_depth_across_nodes():
    size = 1024.0
    # 4096 ranks on 512 nodes: chain of 8 inside, log2(512) = 9 levels across
    expected = 2 * (7 * 3e-6 + 9 * 10e-6) + 2 * size / 50e9
    assert allreduce_cost.tree_s(DGX, size, 4096) == pytest.approx(expected)


def test_hierarchical_splits_into_node_phases_and_a_halving_doubling_across():
    size = 64e6
    inside = 2 * 7 * 3e-6 + 2 * 7 / 8 * size / 150e9
    across = 2 * 5 * 10e-6 + 2 * 31 / 32 * size / 50e9  # 32 nodes
    assert allreduce_cost.hierarchical_s(DGX, size, 256) == pytest.approx(inside + across)
    assert allreduce_cost.hierarchical_s(DGX, size, 8) == allreduce_cost.ring_s(DGX, size, 8)


def test_fastest_algorithm_per_message_as_nccl_picks():
    # A small bucket at 4096 ranks: the ring's 2(N-1) hops (~40 ms) lose to a log-depth tree.
    t, name = allreduce_cost.allreduce(DGX, 25 * MIB, 4096)
    assert name in ("tree", "hierarchical")
    assert t < allreduce_cost.ring_s(DGX, 25 * MIB, 4096) / 10
    assert allreduce_cost.allreduce(DGX, 25 * MIB, 8)[1] == "ring"  # one node: the ring
    assert allreduce_cost.allreduce(DGX, 25 * MIB, 1) == (0.0, "none")


@given(
    size=st.floats(1.0, 1e10),
    n=st.integers(2, 10_000),
    gpus=st.integers(1, 16),
    alpha_i=st.floats(1e-7, 1e-3),
    alpha_n=st.floats(1e-7, 1e-3),
    bw_i=st.floats(1e8, 1e12),
    bw_n=st.floats(1e8, 1e12),
)
def test_chosen_algorithm_is_never_slower_than_any_other(
    size, n, gpus, alpha_i, alpha_n, bw_i, bw_n
):
    top = Topology(Link(alpha_i, bw_i), Link(alpha_n, bw_n), gpus)
    best, name = allreduce_cost.allreduce(top, size, n)
    times = [algo(top, size, n) for algo in allreduce_cost.ALGORITHMS.values()]
    assert best == min(times) == allreduce_cost.ALGORITHMS[name](top, size, n)
    assert best > 0


# ---- bucket overlap ------------------------------------------------------------------------------


def test_buckets_are_full_then_the_remainder():
    assert overlap.bucket_sizes(60.0, 25.0) == [25.0, 25.0, 10.0]
    assert overlap.bucket_sizes(25.0, 25.0) == [25.0]
    assert overlap.bucket_sizes(0.0, 25.0) == []


def test_only_the_last_bucket_is_exposed_when_the_link_keeps_up():
    # 4 buckets of 1 s of backward each, 0.5 s to all-reduce: every one but the last is hidden.
    comm, exposed = overlap.exposed_s([1.0] * 4, lambda size: 0.5, backward_s=4.0)
    assert (comm, exposed) == (2.0, 0.5)


def test_a_slow_link_queues_buckets_past_the_backward_pass():
    # ready at 1, 2, 3, 4 s; 3 s each: done at 4, 7, 10, 13 -> 9 s after the backward pass
    comm, exposed = overlap.exposed_s([1.0] * 4, lambda size: 3.0, backward_s=4.0)
    assert (comm, exposed) == (12.0, 9.0)


@given(
    grad=st.floats(1.0, 1e10),
    bucket=st.floats(1e6, 1e9),
    per_byte=st.floats(0.0, 1e-6),
    backward=st.floats(1e-6, 10.0),
)
def test_exposed_time_lies_between_the_last_bucket_and_all_of_it(grad, bucket, per_byte, backward):
    sizes = overlap.bucket_sizes(grad, bucket)
    assert sum(sizes) == pytest.approx(grad)
    comm, exposed = overlap.exposed_s(sizes, lambda s: s * per_byte, backward)
    assert sizes[-1] * per_byte * (1 - 1e-9) <= exposed <= comm * (1 + 1e-9) + 1e-12


# ---- compute and the whole model --------------------------------------------------------------


def test_compute_model_is_linear_in_batch():
    single = pd.DataFrame({"per_worker_batch": [32, 64, 128], "step_time_s": [0.002, 0.003, 0.005]})
    m = fit_compute_model(single)
    assert m.fixed_s == pytest.approx(0.001) and m.per_sample_s == pytest.approx(3.125e-5)
    assert m.backward_s(32) == pytest.approx(2 / 3 * 0.002)


def test_compute_from_flops_at_a_fraction_of_peak():
    m = from_flops(flops_per_sample=12e9, peak_tflops=989, mfu=0.5)
    assert m.step_s(256) == pytest.approx(256 * 12e9 / (989e12 * 0.5))


def test_step_is_compute_plus_exposed_comm_and_extrapolation_is_marked():
    model = ScalingModel(
        DGX, ComputeModel(0.0, 1e-3), grad_bytes=100e6, bucket_bytes=25 * MIB,
        validated_workers=(1, 8),
    )  # fmt: skip
    step = model.step(256, 64)
    assert step.total_s == pytest.approx(0.064 + step.exposed_s)
    assert 0 < step.exposed_s < step.comm_s
    pred = model.predict([1, 8, 16, 4096], 64).set_index("workers")
    assert pred.loc[1, "efficiency"] == pytest.approx(1.0)
    assert list(pred["extrapolated"]) == [False, False, True, True]
    assert list(pred["nodes"]) == [1, 1, 2, 512]
    assert pred.loc[4096, "efficiency"] < pred.loc[16, "efficiency"] <= 1


def test_a_big_model_on_a_slow_network_is_communication_bound():
    # VGG-16-sized gradients (553 MB) over 25 Gbit/s between 4-GPU servers, 0.4 s of compute:
    # the network needs 2 * 553 MB / 3.125 GB/s = 0.35 s per step, more than the backward pass.
    slow = Topology(Link(5.7e-6, 15.75e9), Link(9.6e-6, 3.125e9), gpus_per_node=4)
    model = ScalingModel(slow, ComputeModel(0.0, 0.4 / 64), grad_bytes=553.6e6,
                         bucket_bytes=64 * MIB)  # fmt: skip
    step = model.step(128, 64)
    assert step.comm_s > 2 * 553.6e6 * 31 / 32 / 3.125e9
    assert step.exposed_s > step.comm_s - model.compute.backward_s(64)


# ---- fits ---------------------------------------------------------------------------------------


def bench_rows(top: Topology, world: int, per_host: int, algorithm=allreduce_cost.ring_s):
    sizes = [2.0**k for k in range(10, 29, 2)]
    return pd.DataFrame(
        {
            "size_bytes": sizes,
            "world_size": world,
            "hardware.workers_per_host": per_host,
            "errors": 0,
            "time_us": [1e6 * algorithm(top, s, world) for s in sizes],
        }
    )


def test_intra_link_recovered_from_a_one_node_comm_bench():
    truth = Topology(Link(20e-6, 1.2e9))
    fit = fit_intra_link(pd.concat([bench_rows(truth, 2, 2), bench_rows(truth, 4, 4)]))
    assert fit.latency_s == pytest.approx(20e-6, rel=1e-6)
    assert fit.bandwidth_Bps == pytest.approx(1.2e9, rel=1e-6)


def test_inter_link_recovered_from_a_two_node_run():
    two_nodes = bench_rows(DGX, 16, 8, allreduce_cost.hierarchical_s)
    fit = fit_inter_link(two_nodes, NVLINK)
    assert fit.latency_s == pytest.approx(IB.latency_s, rel=1e-6)
    assert fit.bandwidth_Bps == pytest.approx(IB.bandwidth_Bps, rel=1e-6)
    both = pd.concat([bench_rows(DGX, 8, 8), two_nodes])
    top = fit_topology(both)
    assert top.gpus_per_node == 8 and top.intra.bandwidth_Bps == pytest.approx(150e9, rel=1e-6)


def test_profile_supplies_what_was_not_measured():
    measured = Topology(Link(50e-6, 2e9))
    top = fit_topology(bench_rows(measured, 8, 8), profile=DGX)
    assert top.inter == IB and top.gpus_per_node == 8
    assert top.intra.latency_s == pytest.approx(50e-6, rel=1e-6)  # measured beats the profile
    assert fit_topology(pd.DataFrame(), profile=DGX) == DGX


def test_oversubscribed_benches_are_left_out_when_others_exist():
    fast, crowded = Topology(Link(20e-6, 1e9)), Topology(Link(800e-6, 0.5e9))
    rows = pd.concat(
        [
            bench_rows(fast, 2, 2).assign(**{"hardware.oversubscribed": False}),
            bench_rows(crowded, 4, 4).assign(**{"hardware.oversubscribed": True}),
        ]
    )
    assert fit_topology(rows).intra.latency_s == pytest.approx(20e-6, rel=1e-6)


def test_comm_fit_ignores_rows_with_errors():
    rows = bench_rows(Topology(Link(20e-6, 1.2e9)), 2, 2)
    rows.loc[0, ["time_us", "errors"]] = [1e9, 3]
    assert fit_topology(rows).intra.latency_s == pytest.approx(20e-6, rel=1e-6)


# ---- profiles ---------------------------------------------------------------------------------


def test_shipped_profiles_load_with_their_sources():
    assert {"dgx1-v100", "dgx-h100", "horovod-pascal-25gbe", "big-basin-p100-50gbe"} <= set(
        profile_names()
    )
    for name in profile_names():
        p = load_profile(name)
        assert p.sources and p.topology.gpus_per_node >= 1 and p.topology.inter is not None
    h100 = load_profile("dgx-h100")
    assert h100.peak("bf16") == 989 and h100.topology.inter.bandwidth_Bps == 400e9
    with pytest.raises(UserError, match="no peak for fp64"):
        h100.peak("fp64")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("gpus_per_node: 8\n", "missing key 'intra_node'"),
        ("- a list\n", "a profile is a mapping"),
        ("gpus_per_node: [\n", "cannot read profile"),
        (
            "gpus_per_node: 4\nintra_node: {bandwidth_GB_s: 0, latency_us: 1}\n"
            "inter_node: {bandwidth_GB_s: 1, latency_us: 1}\n",
            "bandwidth_GB_s must be > 0",
        ),
    ],
)
def test_a_bad_profile_file_is_one_clear_error(tmp_path, text, message):
    path = tmp_path / "mine.yaml"
    path.write_text(text)
    with pytest.raises(UserError, match=message):
        load_profile(str(path))


def test_unknown_profile_lists_the_shipped_ones():
    with pytest.raises(UserError, match="unknown profile 'dgx-9000'.*dgx-h100"):
        load_profile("dgx-9000")


def test_profile_links_are_in_bytes_per_second():
    v100 = load_profile("dgx1-v100").topology
    assert v100.intra.bandwidth_Bps == 150e9 and v100.inter.bandwidth_Bps == 50e9
    assert math.isclose(v100.inter.latency_s, 9.6e-6)
