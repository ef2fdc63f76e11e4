"""The scaling model's parts: topology, all-reduce algorithms, bucket overlap, fits, profiles."""

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpsuite.analysis.scaling import allreduce_cost, overlap
from dpsuite.analysis.scaling.compute import ComputeModel, fit_compute_model, from_flops
from dpsuite.analysis.scaling.fit import fit_inter_link, fit_intra_link, fit_topology
from dpsuite.analysis.scaling.model import MIB, Overheads, ScalingModel, expected_max_factor
from dpsuite.analysis.scaling.profiles import load_profile, profile_names
from dpsuite.analysis.scaling.topology import Link, Topology
from dpsuite.errors import UserError

NVLINK = Link(3e-6, 150e9)
IB = Link(10e-6, 50e9)
DGX = Topology(NVLINK, IB, gpus_per_node=8)


# ---- topology and algorithms -------------------------------------------------------------------


def test_ranks_fill_nodes_in_order():
    assert [DGX.nodes(n) for n in (1, 8, 9, 16, 4096)] == [1, 1, 2, 2, 512]
    assert [DGX.ranks_per_node(n) for n in (2, 8, 16)] == [2, 8, 8]
    alone = Topology(NVLINK)  # nothing known about a network: one node of any size
    assert alone.nodes(4096) == 1 and alone.ranks_per_node(4096) == 4096


GLOO = allreduce_cost.Library(backend="gloo")
NCCL = allreduce_cost.Library(backend="nccl", nccl_version="2.8.4")


def test_ring_formula_counts_inter_node_steps_and_the_slowest_link():
    # 16 ranks on 2 nodes: 30 steps, 2 of them across the network; bandwidth of the NIC.
    size = 100e6
    expected = 28 * 3e-6 + 2 * 10e-6 + 2 * 15 / 16 * size / 50e9
    assert allreduce_cost.ring_s(DGX, size, 16) == pytest.approx(expected)
    # inside one node: NVLink only
    assert allreduce_cost.ring_s(DGX, size, 8) == pytest.approx(
        14 * 3e-6 + 2 * 7 / 8 * size / 150e9
    )


def test_the_reduction_costs_gamma_per_byte_where_it_is_not_in_the_bandwidth():
    cpu = Topology(Link(20e-6, 1e9), gamma=1 / 2e9)  # additions at 2 GB/s
    size, n = 1e6, 4
    plain = allreduce_cost.ring_s(Topology(Link(20e-6, 1e9)), size, n)
    assert allreduce_cost.ring_s(cpu, size, n) == pytest.approx(plain + 3 / 4 * size / 2e9)


def test_nccl_tree_uses_its_own_hop_latency_floor_log2_and_the_092_factor():
    # A 1 GiB message (no tree correction at this size): Simple wins; 4096 ranks on 512 nodes.
    top = Topology(Link(3e-6, 150e9, "nvlink"), Link(10e-6, 50e9, "net"), gpus_per_node=8)
    size = 2.0**30
    latency = 2 * (7 * 28e-6 + 9 * 28e-6)  # NCCL 2.8.4: Tree/Simple is 28 us on every link
    expected = latency + size / (0.92 * 50e9 * 0.5)
    assert allreduce_cost.nccl_s(top, size, 4096, "tree", ll128=False) == pytest.approx(expected)
    # 96 GPUs = 12 nodes: floor(log2 12) = 3 levels, not ceil's 4
    expected_96 = 2 * (7 * 28e-6 + 3 * 28e-6) + size / (0.92 * 50e9 * 0.5)
    assert allreduce_cost.nccl_s(top, size, 96, "tree", ll128=False) == pytest.approx(expected_96)


def test_nccl_ring_latency_and_its_plateau_across_nodes():
    top = Topology(Link(3e-6, 150e9, "nvlink"), Link(10e-6, 50e9, "net"), gpus_per_node=8)
    size = 2.0**30  # large: Simple, and past the plateau threshold (n / 16 x 64 KiB)
    latency = 8.4e-6 + 28 * 3.4e-6 + 2 * 9.6e-6  # 16 ranks: 30 steps, 2 across the network
    expected = 1.9 * latency + size / (50e9 * 16 / 30)
    assert allreduce_cost.nccl_s(top, size, 16, "ring", ll128=False) == pytest.approx(expected)


def test_the_algorithm_set_follows_backend_library_and_nccl_version():
    assert allreduce_cost.Library("nccl", "2.3").algorithms() == ("ring",)  # trees from 2.4
    assert NCCL.algorithms() == ("ring", "tree")
    assert GLOO.algorithms() == ("ring",)  # PyTorch's ProcessGroupGloo: a ring
    caffe2 = allreduce_cost.Library("gloo", library="caffe2")
    assert caffe2.algorithms() == ("ring", "halving-doubling", "hierarchical")
    assert "hierarchical" in allreduce_cost.Library("nccl", library="horovod").algorithms()
    assert allreduce_cost.Library("nccl", only=("ring",)).algorithms() == ("ring",)
    with pytest.raises(ValueError, match="hierarchical not available with torch-ddp on nccl"):
        allreduce_cost.Library("nccl", only=("hierarchical",)).algorithms()


def test_halving_doubling_for_powers_of_two_and_others():
    assert allreduce_cost.halving_doubling_cost(8) == (6, 2 * 7 / 8, 7 / 8)
    # 6 = 4 + 2: the 2 extra ranks fold in first and get the result back (Thakur et al. 2005)
    assert allreduce_cost.halving_doubling_cost(6) == (2 * 2 + 2, 2 + 2 * 3 / 4, 1 + 3 / 4)
    assert allreduce_cost.halving_doubling_cost(1) == (0.0, 0.0, 0.0)


@given(p=st.integers(2, 5000))
def test_a_non_power_of_two_costs_more_than_the_power_of_two_below(p):
    lower = 1 << (p.bit_length() - 1)
    hops, beta, gamma = allreduce_cost.halving_doubling_cost(p)
    low_hops, low_beta, low_gamma = allreduce_cost.halving_doubling_cost(lower)
    assert hops >= low_hops and beta >= low_beta and gamma >= low_gamma
    assert (p == lower) == (hops == low_hops)


def test_hierarchical_splits_into_node_phases_and_a_halving_doubling_across():
    size = 64e6
    inside = 2 * 7 * 3e-6 + 2 * 7 / 8 * size / 150e9
    across = 2 * 5 * 10e-6 + 2 * 31 / 32 * size / 50e9  # 32 nodes
    assert allreduce_cost.hierarchical_s(DGX, size, 256) == pytest.approx(inside + across)
    assert allreduce_cost.hierarchical_s(DGX, size, 8) == allreduce_cost.ring_s(DGX, size, 8)


def test_fastest_algorithm_per_message_as_nccl_picks():
    # A small bucket at 4096 ranks: the ring's 2(N-1) hops lose to a log-depth tree.
    t, name = allreduce_cost.allreduce(DGX, 25 * MIB, 4096, NCCL)
    assert name == "tree"
    assert t < allreduce_cost.nccl_s(DGX, 25 * MIB, 4096, "ring", False) / 2
    assert allreduce_cost.allreduce(DGX, 25 * MIB, 8, NCCL)[1] == "ring"  # one node: the ring
    assert allreduce_cost.allreduce(DGX, 25 * MIB, 1, NCCL) == (0.0, "none")
    ring_only = allreduce_cost.Library("nccl", only=("ring",))
    assert allreduce_cost.allreduce(DGX, 25 * MIB, 4096, ring_only)[1] == "ring"


@given(
    size=st.floats(1.0, 1e10),
    n=st.integers(2, 10_000),
    gpus=st.integers(1, 16),
    alpha_i=st.floats(1e-7, 1e-3),
    alpha_n=st.floats(1e-7, 1e-3),
    bw_i=st.floats(1e8, 1e12),
    bw_n=st.floats(1e8, 1e12),
    library=st.sampled_from(
        [
            allreduce_cost.Library("nccl", library="horovod", nccl_ll128=True),
            allreduce_cost.Library("gloo", library="caffe2"),
            allreduce_cost.Library("nccl", "2.3"),
        ]
    ),
)
def test_chosen_algorithm_is_never_slower_than_any_other(
    size, n, gpus, alpha_i, alpha_n, bw_i, bw_n, library
):
    top = Topology(Link(alpha_i, bw_i, "nvlink"), Link(alpha_n, bw_n, "net"), gpus)
    best, name = allreduce_cost.allreduce(top, size, n, library)
    times = [allreduce_cost.cost_function(library, a)(top, size, n) for a in library.algorithms()]
    assert best == min(times) == allreduce_cost.cost_function(library, name)(top, size, n)
    assert best > 0


# ---- buckets and overlap -------------------------------------------------------------------------


def test_buckets_are_full_then_the_remainder():
    assert overlap.bucket_sizes(60.0, 25.0) == [25.0, 25.0, 10.0]
    assert overlap.bucket_sizes(25.0, 25.0) == [25.0]
    assert overlap.bucket_sizes(0.0, 25.0) == []


@given(
    numels=st.lists(st.integers(1, 3_000_000), min_size=1, max_size=40),
    cap_mb=st.sampled_from([1, 4, 25]),
)
@settings(deadline=None)  # the first call imports torch.distributed
def test_ddp_buckets_are_torchs_own_assignment(numels, cap_mb):
    import torch
    import torch.distributed as dist

    params = [torch.empty(n) for n in numels]
    # DDP rebuilds its buckets in backward order (reverse registration) with a 1 MiB first one.
    order = list(reversed(params))
    limits = [dist._DEFAULT_FIRST_BUCKET_BYTES, cap_mb * MIB]
    indices, _ = dist._compute_bucket_assignment_by_size(order, limits, [False] * len(order))
    torch_sizes = [sum(4.0 * order[i].numel() for i in bucket) for bucket in indices]
    ours = overlap.ddp_buckets([4.0 * n for n in numels], cap_mb * MIB)
    assert [size for size, _ in ours] == torch_sizes


def test_a_large_tensor_is_never_split_and_its_readiness_follows_the_work():
    # VGG-like: a huge fc layer (little work) registered last, so its gradient comes first.
    tensors = [10e6] * 10 + [400e6]
    work = [1.0] * 10 + [0.01]
    buckets = overlap.ddp_buckets(tensors, 25 * MIB, work=work)
    assert buckets[0][0] == 400e6  # its own bucket, whole
    assert buckets[0][1] == pytest.approx(0.01 / 10.01)  # ready almost at once
    by_bytes = overlap.ddp_buckets(tensors, 25 * MIB)
    assert by_bytes[0][1] == pytest.approx(400 / 500)


def test_a_tied_embedding_ready_last_is_exposed_whole():
    # The embedding is registered first, so DDP all-reduces it last: nothing hides it.
    tensors = [322e6] + [5e6] * 40
    buckets = overlap.ddp_buckets(tensors, 25 * MIB)
    last_size, last_ready = buckets[-1]
    assert last_size >= 322e6 and last_ready == 1.0
    comm, exposed = overlap.exposed_s(buckets, lambda size: size / 1e11, backward_s=1.0)
    assert exposed >= 322e6 / 1e11


def test_only_the_last_bucket_is_exposed_when_the_link_keeps_up():
    # 4 buckets of 1 s of backward each, 0.5 s to all-reduce: every one but the last is hidden.
    buckets = [(1.0, k / 4) for k in range(1, 5)]
    comm, exposed = overlap.exposed_s(buckets, lambda size: 0.5, backward_s=4.0)
    assert (comm, exposed) == (2.0, 0.5)


def test_a_slow_link_queues_buckets_past_the_backward_pass():
    # ready at 1, 2, 3, 4 s; 3 s each: done at 4, 7, 10, 13 -> 9 s after the backward pass
    buckets = [(1.0, k / 4) for k in range(1, 5)]
    comm, exposed = overlap.exposed_s(buckets, lambda size: 3.0, backward_s=4.0)
    assert (comm, exposed) == (12.0, 9.0)


@given(
    grad=st.floats(1.0, 1e10),
    bucket=st.floats(1e6, 1e9),
    per_byte=st.floats(0.0, 1e-6),
    backward=st.floats(1e-6, 10.0),
)
def test_exposed_time_lies_between_the_last_bucket_and_all_of_it(grad, bucket, per_byte, backward):
    buckets = overlap.even_buckets(grad, bucket)
    assert sum(size for size, _ in buckets) == pytest.approx(grad)
    comm, exposed = overlap.exposed_s(buckets, lambda s: s * per_byte, backward)
    last = buckets[-1][0] * per_byte * (1 - 1e-9) - 4e-16 * backward  # less one rounding
    assert last <= exposed <= comm * (1 + 1e-9) + 1e-12


def test_nccls_sms_slow_the_backward_pass_it_overlaps():
    # ready at 2 s of a 4 s backward pass, 1 s to all-reduce on 12 of 80 SMs: 1 s at 68/80 speed
    share = 12 / 80
    plain = overlap.schedule([(1.0, 0.5)], lambda size: 1.0, 4.0, 0.0)
    slowed = overlap.schedule([(1.0, 0.5)], lambda size: 1.0, 4.0, share)
    assert (plain.comm_s, plain.exposed_s, plain.slowed_s) == (1.0, 0.0, 0.0)
    assert slowed.slowed_s == pytest.approx(share * 1.0)
    assert slowed.exposed_s == 0.0


def test_a_backward_pass_waited_for_by_the_network_ends_the_step_no_later():
    # ready at 1 s, 10 s to all-reduce: the step ends with the all-reduce, however slow the
    # backward pass under it, as long as it ends first.
    plain = overlap.schedule([(1.0, 0.25)], lambda size: 10.0, 4.0, 0.0)
    slowed = overlap.schedule([(1.0, 0.25)], lambda size: 10.0, 4.0, 0.1)
    assert slowed.slowed_s == pytest.approx(3 / 0.9 - 3)
    assert slowed.slowed_s + slowed.exposed_s == pytest.approx(plain.exposed_s)


@given(
    grad=st.floats(1e3, 1e10),
    per_byte=st.floats(0.0, 1e-6),
    share=st.floats(0.0, 0.5),
)
def test_sharing_the_sms_never_shortens_a_step(grad, per_byte, share):
    buckets = overlap.even_buckets(grad, 25 * MIB)
    plain = overlap.schedule(buckets, lambda s: s * per_byte, 1.0, 0.0)
    slowed = overlap.schedule(buckets, lambda s: s * per_byte, 1.0, share)
    assert slowed.slowed_s <= share / (1 - share) * plain.comm_s + 1e-9
    assert slowed.slowed_s + slowed.exposed_s >= plain.exposed_s - 1e-9


def test_an_sm_share_outside_0_to_1_is_an_error():
    with pytest.raises(ValueError, match="sm_share"):
        overlap.schedule([(1.0, 1.0)], lambda size: 1.0, 1.0, 1.0)


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


def test_expected_maximum_of_n_draws_of_the_measured_spread():
    samples = np.array([0.5, 1.5])  # mean 1: the max of 2 draws is 1.5 three times in four
    assert expected_max_factor(samples, 1) == pytest.approx(1.0)
    assert expected_max_factor(samples, 2) == pytest.approx(0.25 * 0.5 + 0.75 * 1.5)
    assert expected_max_factor(np.ones(10), 4096) == pytest.approx(1.0)  # no spread, no wait
    many = [expected_max_factor(samples, n) for n in (1, 2, 8, 1000)]
    assert many == sorted(many) and many[-1] <= 1.5  # grows with N, never past the slowest step


def test_stragglers_add_the_wait_for_the_slowest_rank_and_make_it_an_estimate():
    spread = Overheads(step_samples=(0.9, 1.0, 1.1, 1.0))
    base = ScalingModel(DGX, ComputeModel(0.0, 1e-3), grad_bytes=1e6)
    jittery = replace(base, overheads=spread, measured=("compute", "straggler jitter"))
    assert base.kind() == "bound" and jittery.kind() == "estimate"
    step = jittery.step(64, 32)
    assert step.wait_s == pytest.approx(
        0.032 * (expected_max_factor(np.array(spread.step_samples), 64) - 1)
    )
    assert step.total_s == pytest.approx(base.step_s(64, 32) + step.wait_s)
    assert jittery.step(1, 32).wait_s == 0.0
    row = jittery.predict([64], 32).iloc[0]
    assert row["prediction"] == "estimate" and "straggler jitter" in row["measured_terms"]


def test_a_measured_node_efficiency_is_met_at_the_node_and_carried_beyond_it():
    base = ScalingModel(DGX, ComputeModel(0.0, 1e-3), grad_bytes=100e6)
    node = replace(base, overheads=Overheads(node_efficiency=0.85, node_workers=8))
    assert node.efficiency(8, 256) == pytest.approx(0.85)
    overhead = node.step(8, 256).overhead_s
    assert overhead > 0 and node.step(64, 256).overhead_s == pytest.approx(overhead)
    assert node.step(4, 256).overhead_s == 0.0  # below the node nothing was measured
    assert node.efficiency(64, 256) < base.efficiency(64, 256)
    # efficiency against one node, as papers report it
    assert node.efficiency(8, 256, baseline=8) == pytest.approx(1.0)


def test_a_measured_input_rate_caps_each_nodes_throughput():
    # 1 ms per sample: a GPU trains 1,000 samples/s; a node's host loads 5,000.
    base = ScalingModel(DGX, ComputeModel(0.0, 1e-3), grad_bytes=100e6)
    fed = replace(base, input_samples_per_s=5000.0, measured=("compute", "input rate"))
    for n in (1, 2, 4, 8, 16, 64):
        node_rate = min(n, 8) * 256 / base.step_s(n, 256)  # one node's samples/s, unbounded
        per_node = fed.topology.ranks_per_node(n) * 256 / fed.step_s(n, 256)
        assert per_node == pytest.approx(min(node_rate, 5000.0))
    assert fed.step(4, 256).input_wait_s == 0.0  # 4 GPUs want < 4,000/s: not bound
    assert fed.step(8, 256).input_wait_s > 0  # 8 want ~8,000/s: bound
    pred = fed.predict([1, 4, 8, 64], 256).set_index("workers")
    assert list(pred["input_bound"]) == [False, False, True, True]
    assert pred.loc[64, "samples_per_s"] == pytest.approx(8 * 5000.0)
    assert pred.loc[8, "efficiency"] == pytest.approx(5000.0 / 8000.0)
    assert (pred["prediction"] == "bound").all() and "input rate" in pred.loc[8, "measured_terms"]
    # Below one GPU's rate even the baseline waits: the efficiency is against that.
    starved = replace(base, input_samples_per_s=500.0)
    assert starved.step(1, 256).input_wait_s > 0
    assert starved.efficiency(8, 256) == pytest.approx(1 / 8)


def test_gradient_dtype_halves_the_bytes_on_the_wire():
    fp32 = ScalingModel(DGX, ComputeModel(0.0, 1e-6), grad_bytes=4 * 100e6)
    bf16 = replace(fp32, grad_bytes=2 * 100e6, grad_element_bytes=2)
    assert bf16.step(64, 1).comm_s < fp32.step(64, 1).comm_s


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
    two_nodes = bench_rows(DGX, 16, 8)  # a ring over 2 nodes, as gloo runs it
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
    assert h100.peak("bf16") == 989
    assert h100.topology.inter.bandwidth_Bps == pytest.approx(400e9 * 4096 / 4122)
    with pytest.raises(UserError, match="no peak for fp64"):
        h100.peak("fp64")
    v100, a100 = load_profile("dgx1-v100"), load_profile("dgx-a100")
    assert (v100.sm_count, v100.nccl_channels) == (80, 12)
    assert (a100.sm_count, a100.nccl_channels) == (108, 24)
    assert v100.comm_sm_share() == 12 / 80 and v100.comm_sm_share(1) == 1 / 80
    assert h100.comm_sm_share() == 0.0  # its NCCL channels are not stated


def test_a_planned_model_on_nccl_shares_the_sms_and_on_gloo_does_not():
    from dpsuite.analysis.scaling.allreduce_cost import Library
    from dpsuite.analysis.scaling.plan import Workload, plan_fit

    v100, vgg = load_profile("dgx1-v100"), Workload("vgg", 138e6, None)
    nccl = plan_fit(v100, vgg, samples_per_s=200)
    gloo = plan_fit(v100, vgg, samples_per_s=200, library=Library(backend="gloo"))
    assert nccl.model.comm_sm_share == 12 / 80 and gloo.model.comm_sm_share == 0.0
    step = nccl.model.step(8, 64)
    assert step.slowed_s > 0 and step.total_s == pytest.approx(
        step.compute_s + step.slowed_s + step.exposed_s
    )
    assert nccl.model.step(1, 64).slowed_s == 0.0


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
        (
            "gpus_per_node: 4\nsm_count: 8\nnccl_channels: 8\n"
            "intra_node: {bandwidth_GB_s: 1, latency_us: 1}\n"
            "inter_node: {bandwidth_GB_s: 1, latency_us: 1}\n",
            r"nccl_channels \(8\) must be fewer than sm_count \(8\)",
        ),
        (
            "gpus_per_node: 4\nsm_count: 0.5\nintra_node: {bandwidth_GB_s: 1, latency_us: 1}\n"
            "inter_node: {bandwidth_GB_s: 1, latency_us: 1}\n",
            "sm_count must be an integer >= 1",
        ),
        (
            "gpus_per_node: 4\nintra_node: {bandwidth_GB_s: 1, latency_us: 1}\n"
            "inter_node: {bandwidth_GB_s: 1, latency_us: 1, transport: udp}\n",
            "inter_node: transport must be one of infiniband, roce-v1, roce-v2, tcp, got 'udp'",
        ),
        (
            "gpus_per_node: 4\nintra_node: {bandwidth_GB_s: 1, latency_us: 1}\n"
            "inter_node: {bandwidth_GB_s: 1, latency_us: 1, payload_bytes: 4096}\n",
            "inter_node: payload_bytes needs a transport",
        ),
        (
            "gpus_per_node: 4\nintra_node: {bandwidth_GB_s: 1, latency_us: 1, transport: tcp}\n"
            "inter_node: {bandwidth_GB_s: 1, latency_us: 1}\n",
            "intra_node: transport is a key of inter_node",
        ),
        (
            "gpus_per_node: 4\nintra_node: {bandwidth_GB_s: 1, latency_us: 1}\n"
            "inter_node: {bandwidth_GB_s: 1, latency_us: 1, transport: tcp, payload_bytes: 0}\n",
            "inter_node: payload_bytes must be an integer >= 1, got 0",
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
    assert v100.intra.bandwidth_Bps == 150e9 and v100.inter.framing.transport == "infiniband"
    assert v100.inter.bandwidth_Bps == pytest.approx(50e9 * 4096 / 4122)
    assert math.isclose(v100.inter.latency_s, 9.6e-6)


@pytest.mark.parametrize(
    ("transport", "payload", "wire"),
    [
        ("infiniband", 4096, 4096 + 8 + 12 + 4 + 2),  # LRH, BTH, ICRC, VCRC
        ("roce-v1", 1024, 1024 + 38 + 40 + 12 + 4),  # Ethernet on the wire, GRH, BTH, ICRC
        ("roce-v2", 1024, 1024 + 38 + 20 + 8 + 12 + 4),  # Ethernet, IPv4, UDP, BTH, ICRC
        ("tcp", 1448, 1500 + 38),  # a full 1500-byte IP packet in its Ethernet frame
    ],
)
def test_a_networks_payload_is_its_line_rate_less_each_packets_headers(
    tmp_path, transport, payload, wire
):
    path = tmp_path / "net.yaml"
    path.write_text(
        "gpus_per_node: 8\nintra_node: {bandwidth_GB_s: 100, latency_us: 1}\n"
        f"inter_node: {{bandwidth_GB_s: 10, latency_us: 5, transport: {transport}}}\n"
    )
    topology = load_profile(str(path)).topology
    assert topology.inter.bandwidth_Bps == pytest.approx(10e9 * payload / wire)
    assert topology.intra.bandwidth_Bps == 100e9 and topology.intra.framing is None


def test_bigger_packets_leave_more_of_the_line_to_data_and_lift_a_network_bound_prediction(
    tmp_path,
):
    from dpsuite.analysis.scaling.plan import Workload, plan_fit

    def efficiency(extra: str) -> float:
        path = tmp_path / "net.yaml"
        path.write_text(
            "gpus_per_node: 4\npeak_tflops: {fp32: 10}\n"
            "intra_node: {bandwidth_GB_s: 15, latency_us: 5, kind: pci}\n"
            f"inter_node: {{bandwidth_GB_s: 3.125, latency_us: 10{extra}}}\n"
        )
        fit = plan_fit(load_profile(str(path)), Workload("vgg", 138e6, None), samples_per_s=150)
        return fit.model.efficiency(64, 64, 1)

    stated, small, jumbo = (
        efficiency(extra)
        for extra in ("", ", transport: roce-v2", ", transport: roce-v2, payload_bytes: 4096")
    )
    assert small < jumbo < stated


def test_the_fitted_library_is_the_runs_backend_at_their_nccl_version():
    from dpsuite.analysis.scaling.fit import _library

    def runs(**cols):
        return pd.DataFrame({k: [v] for k, v in cols.items()})

    assert _library(runs(backend="gloo")).algorithms() == ("ring",)
    assert _library(runs(backend="nccl", **{"hardware.nccl": "2.21.5"})).algorithms() == (
        "ring",
        "tree",
    )
    assert _library(runs(backend="nccl", **{"hardware.nccl": "2.3.7"})).algorithms() == ("ring",)
    old_torch = _library(runs(backend="nccl", **{"hardware.nccl": "2708"}))
    assert old_torch.nccl_version == allreduce_cost.NCCL_MODEL_VERSION


LINKS = (
    "intra_node: {bandwidth_GB_s: 1, latency_us: 1}\n"
    "inter_node: {bandwidth_GB_s: 1, latency_us: 1}\n"
)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # Each used to load: the last value won, the misspelt key was ignored, 1e8 GPUs a node.
        (
            "gpus_per_node: 4\ngpus_per_node: 8\n" + LINKS,
            r"duplicate key gpus_per_node \(line 1 and line 2\)",
        ),
        (
            "gpus_per_node: 4\nintra_node: {bandwidth_GB_s: 1, latency_us: 1, latency_us: 2}\n"
            "inter_node: {bandwidth_GB_s: 1, latency_us: 1}\n",
            "duplicate key latency_us",
        ),
        (
            "gpus_per_node: 4\nnccl_chanels: 4\n" + LINKS,
            r"unknown key nccl_chanels \(did you mean nccl_channels\?\)",
        ),
        (
            "gpus_per_node: 4\nintra_node: {bandwidth_GB_s: 1, latency_us: 1}\n"
            "inter_node: {bandwith_GB_s: 1, latency_us: 1}\n",
            r"unknown key inter_node.bandwith_GB_s \(did you mean inter_node.bandwidth_GB_s\?\)",
        ),
        (
            "gpus_per_node: 100000000\n" + LINKS,
            "gpus_per_node must be at most 1,024, got 100,000,000",
        ),
        ("gpus_per_node: 0\n" + LINKS, "gpus_per_node must be an integer >= 1"),
        ("gpus_per_node: 4\nsm_count: 5000\n" + LINKS, "sm_count must be at most 1,024"),
        ("gpus_per_node: 4\nnccl_ll128: 1\n" + LINKS, "nccl_ll128 must be true or false"),
        (
            "gpus_per_node: 4\npeak_tflops: {fp32: 1000000000}\n" + LINKS,
            "fp32 must be at most 100,000",
        ),
        ("gpus_per_node: 4\npeak_tflops: [1, 2]\n" + LINKS, "peak_tflops is a mapping"),
        ("gpus_per_node: 4\nreduce_GB_s: .nan\n" + LINKS, "reduce_GB_s must be a finite number"),
        ("gpus_per_node: 4\nintra_node: 5\ninter_node: 5\n", "intra_node is a mapping of keys"),
        (
            "gpus_per_node: 4\nintra_node: {bandwidth_GB_s: 1000000000, latency_us: 1}\n"
            "inter_node: {bandwidth_GB_s: 1, latency_us: 1}\n",
            "intra_node.bandwidth_GB_s must be at most 100,000",
        ),
        (
            "gpus_per_node: 4\nintra_node: {bandwidth_GB_s: 1, latency_us: 1}\n"
            "inter_node: {bandwidth_GB_s: 1, latency_us: 1, transport: tcp, "
            "payload_bytes: 1000000}\n",
            "payload_bytes must be at most 65,536",
        ),
    ],
)
def test_a_profile_is_read_strictly(tmp_path, text, message):
    path = tmp_path / "mine.yaml"
    path.write_text(text)
    with pytest.raises(UserError, match=message):
        load_profile(str(path))
