"""`dpsuite predict`: fitted to a results tree and validated, planned on a profile, bad input."""

import warnings
from dataclasses import replace

import pandas as pd
import pytest

from dpsuite import results
from dpsuite.analysis.scaling import allreduce_cost
from dpsuite.analysis.scaling.compute import ComputeModel
from dpsuite.analysis.scaling.fit import fit_topology
from dpsuite.analysis.scaling.model import MIB, ScalingModel
from dpsuite.analysis.scaling.topology import Link, Topology
from tests import report_trees as trees

LINK = Link(20e-6, 1.2e9)  # 20 us per hop, 1.2 GB/s
PARAMS = 11_000_000  # two 25 MiB buckets of fp32 gradients
TRUTH = ScalingModel(
    Topology(LINK),
    ComputeModel(0.001, 2e-5),
    grad_bytes=4 * PARAMS,
    bucket_bytes=25 * MIB,
    library=allreduce_cost.Library(backend="gloo"),  # the runs' backend: a ring, as PyTorch's
)


def write_bench(root, world: int = 2, truth: ScalingModel = TRUTH, per_host: int | None = None):
    # The runs' two bucket sizes measured too: the model reads their all-reduces off exactly.
    sizes = sorted({2**k for k in range(10, 29, 2)} | {25 * MIB, 4 * PARAMS - 25 * MIB})
    rows = []
    for size in sizes:
        t = allreduce_cost.ring_s(truth.topology, size, world)
        rows.append(
            {
                "size_bytes": size,
                "count": size // 4,
                "dtype": "fp32",
                "time_us": 1e6 * t,
                "algbw_GBps": size / t / 1e9,
                "busbw_GBps": size / t / 1e9 * 2 * (world - 1) / world,
                "errors": 0,
            }
        )
    meta = {
        "bench_id": f"bench-w{world}",
        "world_size": world,
        "backend": "gloo",
        "hardware": {**trees.hardware("box-a", "box-a"), "workers_per_host": per_host or world},
    }
    results.write_comm_bench(root / "comm_bench" / f"bench-w{world}", meta, rows)


def write_runs(root, flops_per_sample: float | None = None) -> None:
    """Runs at 1 and 2 workers whose step times are the true model's."""
    for workers in (1, 2):
        step = TRUTH.step_s(workers, trees.PER_WORKER)
        run = trees.write_run(
            root, workers=workers, samples_per_s=workers * trees.PER_WORKER / step
        )
        rec = results.read_json(run / "run.json")
        rec.update(num_params=PARAMS, bucket_cap_mb=25.0)
        if flops_per_sample:
            rec["metrics"]["flops_per_sample"] = flops_per_sample
        results.write_json_atomic(run / "run.json", rec)


def test_fitted_to_runs_the_model_predicts_what_it_was_fitted_on(dpsuite, tmp_path, capsys):
    root, out = tmp_path / "res", tmp_path / "pred"
    write_runs(root)
    write_bench(root)
    assert dpsuite("predict", str(root), "--max-workers", "64", "--out", str(out)) == 0
    text = capsys.readouterr().out
    assert "validated up to 2 workers" in text and "between nodes not known" in text
    validation = pd.read_csv(out / "validation.csv")
    assert validation["error_pct"].abs().max() < 1e-6
    pred = pd.read_csv(out / "predictions.csv").set_index("workers")
    assert list(pred.index) == [1, 2, 4, 8, 16, 32, 64]
    assert not pred.loc[2, "extrapolated"] and pred.loc[4, "extrapolated"]
    assert (pred["nodes"] == 1).all()  # no network measured: one node of any size
    model = pd.read_csv(out / "models.csv").iloc[0]
    assert model["intra_latency_us"] == pytest.approx(20, rel=1e-6)
    assert model["bucket_bytes"] == 25 * MIB and model["grad_bytes"] == 4 * PARAMS


def test_the_inter_node_part_is_validated_against_runs_across_nodes(dpsuite, tmp_path):
    # Two hosts of 2 ranks: the network 10x slower than the link inside a host.
    truth = replace(TRUTH, topology=Topology(LINK, Link(50e-6, 0.12e9), gpus_per_node=2))
    root, out = tmp_path / "res", tmp_path / "pred"
    write_bench(root, 2, truth)
    write_bench(root, 4, truth, per_host=2)
    for workers in (1, 2, 4):
        step = truth.step_s(workers, trees.PER_WORKER)
        run = trees.write_run(
            root, workers=workers, samples_per_s=workers * trees.PER_WORKER / step
        )
        rec = results.read_json(run / "run.json")
        rec.update(num_params=PARAMS, bucket_cap_mb=25.0)
        results.write_json_atomic(run / "run.json", rec)
    assert dpsuite("predict", str(root), "--workers", "1,2,4,8", "--out", str(out)) == 0
    validation = pd.read_csv(out / "validation.csv").set_index("workers")
    assert validation["error_pct"].abs().max() < 1e-3  # at 4 workers: across the network
    model = pd.read_csv(out / "models.csv").iloc[0]
    assert model["inter_latency_us"] == pytest.approx(50, rel=1e-3)
    assert model["inter_bandwidth_GBps"] == pytest.approx(0.12, rel=1e-3)
    pred = pd.read_csv(out / "predictions.csv").set_index("workers")
    assert list(pred["nodes"]) == [1, 1, 2, 4]


def test_only_all_reduce_benchmarks_fit_the_links(tmp_path):
    write_bench(tmp_path)
    trees.write_comm_bench(tmp_path, tag="box-a", peak=50.0, collective="all_gather")
    bench = results.load_comm_bench(tmp_path)
    assert set(bench["collective"]) == {"all_reduce", "all_gather"}
    topology = fit_topology(bench)
    assert topology.intra.latency_s == pytest.approx(LINK.latency_s, rel=1e-6)
    assert topology.intra.s_per_byte == pytest.approx(LINK.s_per_byte, rel=1e-6)


def test_a_zero_time_is_refused_in_one_line_not_lapack_noise(tmp_path, capfd):
    """A comm-bench time of 0 (past the gate, as a frame given to the fit) is a ValueError in one
    line, before numpy divides by it or LAPACK is handed what it cannot take."""
    write_bench(tmp_path)
    bench = results.load_comm_bench(tmp_path)
    bench.loc[0, "time_us"] = 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's divide-by-zero would be a RuntimeWarning
        with pytest.raises(ValueError, match="^a comm-bench time is not a positive number"):
            fit_topology(bench)
    assert capfd.readouterr().err == ""  # LAPACK writes its DLASCL lines to the C stderr


def test_predict_on_a_comm_bench_time_of_zero_is_one_line(dpsuite, tmp_path, capfd):
    write_runs(tmp_path)
    write_bench(tmp_path)
    csv = tmp_path / "comm_bench" / "bench-w2" / "comm_bench.csv"
    bench = pd.read_csv(csv)
    bench.loc[0, "time_us"] = 0
    bench.to_csv(csv, index=False)
    with pytest.warns(UserWarning, match="time_us is 0.0 in a row, not a finite float > 0"):
        assert dpsuite("predict", str(tmp_path), "--out", str(tmp_path / "pred")) == 2
    err = capfd.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("dpsuite: error: nothing to fit"), err


def test_a_profile_gives_the_network_a_one_node_measurement_lacks(dpsuite, tmp_path, capsys):
    root, out = tmp_path / "res", tmp_path / "pred"
    write_runs(root)
    write_bench(root)
    code = dpsuite("predict", str(root), "--profile", "dgx1-v100", "--out", str(out))
    assert code == 0
    pred = pd.read_csv(out / "predictions.csv").set_index("workers")
    assert pred.loc[16, "nodes"] == 2 and pred.loc[4096, "nodes"] == 512
    model = pd.read_csv(out / "models.csv").iloc[0]
    assert model["intra_latency_us"] == pytest.approx(20, rel=1e-6)  # measured, not the profile
    assert model["inter_line_GBps"] == pytest.approx(50)  # the profile's 4 x 100 Gb/s
    # of which InfiniBand's packet headers leave 4096 of every 4122 bytes to data
    assert model["inter_bandwidth_GBps"] == pytest.approx(50 * 4096 / 4122)
    assert model["inter_transport"] == "infiniband"


def test_planning_a_workload_counted_by_its_runs_on_a_profile(dpsuite, tmp_path, capsys):
    root, out = tmp_path / "res", tmp_path / "pred"
    write_runs(root, flops_per_sample=3e6)
    code = dpsuite(
        "predict", str(root), "--profile", "dgx-h100", "--workload", "mnist1d_mlp",
        "--batch", "64", "--mfu", "0.5", "--out", str(out),
    )  # fmt: skip
    assert code == 0
    assert "nothing measured to validate it" in capsys.readouterr().out
    pred = pd.read_csv(out / "predictions.csv").set_index("workers")
    assert pred.loc[1, "compute_s"] == pytest.approx(64 * 3e6 / (989e12 * 0.5))  # bf16 peak
    assert pred.loc[16, "nodes"] == 2 and pred.loc[2:, "extrapolated"].all()
    assert pred.loc[4096, "algorithm"] in ("tree", "hierarchical")


def test_planning_from_a_single_gpu_throughput(dpsuite, tmp_path):
    out = tmp_path / "pred"
    code = dpsuite(
        "predict", "--profile", "horovod-pascal-25gbe", "--params", "138.4e6",
        "--samples-per-s", "154", "--batch", "64", "--bucket-mb", "64", "--out", str(out),
    )  # fmt: skip
    assert code == 0
    pred = pd.read_csv(out / "predictions.csv").set_index("workers")
    assert pred.loc[1, "step_time_s"] == pytest.approx(64 / 154)
    assert 0.7 < pred.loc[128, "efficiency"] < 0.85  # VGG-16 on 25 Gbit/s: network-bound


def test_nccls_channels_slow_the_overlapped_backward_pass_by_their_share_of_the_sms(
    dpsuite, tmp_path, capsys
):
    vgg = ("predict", "--profile", "dgx1-v100", "--params", "138.4e6", "--samples-per-s", "400")
    slowdown = {}
    for channels in ("12", "1"):
        out = tmp_path / channels
        given = ("--nccl-channels", channels) if channels == "1" else ()
        args = ("--batch", "64", "--workers", "1,8", "--out", str(out))
        assert dpsuite(*vgg, *args, *given) == 0
        printed = capsys.readouterr().out
        assert f"it holds {100 * int(channels) / 80:.1f} % of the GPU's SMs" in printed
        assert "NCCL's SMs" in printed.splitlines()[-2]  # the 8-worker line
        pred = pd.read_csv(out / "predictions.csv").set_index("workers")
        assert pred.loc[1, "comm_sm_slowdown_s"] == 0.0
        slowdown[channels] = pred.loc[8, "comm_sm_slowdown_s"]
        models = pd.read_csv(out / "models.csv")
        assert models.loc[0, "comm_sm_share"] == pytest.approx(int(channels) / 80)
    # the profile's 12 channels (its default) take 12 times the SMs of one
    assert slowdown["12"] > 0 and slowdown["1"] == pytest.approx(slowdown["12"] / 12, rel=0.1)


VGG_ON_HOROVOD = (
    "predict", "--profile", "horovod-pascal-25gbe", "--params", "138.4e6",
    "--samples-per-s", "154", "--batch", "64", "--bucket-mb", "64",
)  # fmt: skip


def test_any_worker_counts_against_any_baseline(dpsuite, tmp_path):
    out = tmp_path / "pred"
    args = ("--workers", "8,16,96", "--baseline-workers", "8", "--out", str(out))
    assert dpsuite(*VGG_ON_HOROVOD, *args) == 0
    pred = pd.read_csv(out / "predictions.csv").set_index("workers")
    assert list(pred.index) == [8, 16, 96]  # 96 is not a power of two
    assert pred.loc[8, "efficiency"] == pytest.approx(1.0)
    assert (pred["baseline_workers"] == 8).all() and pred.loc[96, "nodes"] == 24
    assert dpsuite(*VGG_ON_HOROVOD, "--max-workers", "96", "--out", str(out)) == 0
    assert pd.read_csv(out / "predictions.csv")["workers"].tolist()[-2:] == [64, 96]


def test_library_options_choose_the_algorithms(dpsuite, tmp_path, capsys):
    out = tmp_path / "pred"
    workers = ("--workers", "512", "--out", str(out))
    assert dpsuite(*VGG_ON_HOROVOD, "--library", "horovod", *workers) == 0
    assert "algorithms ring, tree, hierarchical" in capsys.readouterr().out
    assert dpsuite(*VGG_ON_HOROVOD, "--nccl-version", "2.3", *workers) == 0
    assert pd.read_csv(out / "predictions.csv")["algorithm"].tolist() == ["ring"]
    assert dpsuite(*VGG_ON_HOROVOD, "--algorithms", "ring", *workers) == 0
    assert pd.read_csv(out / "predictions.csv")["algorithm"].tolist() == ["ring"]


def test_gradient_dtype_and_a_measured_node_efficiency(dpsuite, tmp_path, capsys):
    out = tmp_path / "pred"
    assert dpsuite(*VGG_ON_HOROVOD, "--workers", "1,128", "--out", str(out)) == 0
    assert "bound (at most" in capsys.readouterr().out
    fp32 = pd.read_csv(out / "predictions.csv").set_index("workers")
    assert (
        dpsuite(*VGG_ON_HOROVOD, "--workers", "1,128", "--grad-dtype", "bf16", "--out", str(out))
        == 0
    )
    bf16 = pd.read_csv(out / "predictions.csv").set_index("workers")
    assert bf16.loc[128, "comm_s"] == pytest.approx(fp32.loc[128, "comm_s"] / 2, rel=0.05)
    node = ("--measured-node-efficiency", "0.9", "--workers", "1,4,128", "--out", str(out))
    assert dpsuite(*VGG_ON_HOROVOD, *node) == 0
    assert (
        "an efficiency estimate; measured terms: compute, node efficiency"
        in capsys.readouterr().out
    )
    pred = pd.read_csv(out / "predictions.csv").set_index("workers")
    assert pred.loc[4, "efficiency"] == pytest.approx(0.9)  # the profile's 4 GPUs per node
    assert pred.loc[128, "efficiency"] < fp32.loc[128, "efficiency"]
    assert (pred["prediction"] == "estimate").all()


def test_a_measured_input_rate_bounds_each_node_and_is_labelled(dpsuite, tmp_path, capsys):
    out = tmp_path / "pred"
    # 154 samples/s per GPU, 4 per node: a node wants 616/s; its host loads 400.
    args = ("--workers", "1,2,4,128", "--input-samples-per-s", "400", "--out", str(out))
    assert dpsuite(*VGG_ON_HOROVOD, *args) == 0
    printed = capsys.readouterr().out
    assert "input: at most 400 samples/s per node (a measured input rate, given)" in printed
    assert "measured terms: compute, input rate" in printed
    lines = [line for line in printed.splitlines() if "workers  " in line]
    assert [line.endswith("input-bound") for line in lines] == [False, False, True, True]
    pred = pd.read_csv(out / "predictions.csv").set_index("workers")
    assert pred.loc[4, "samples_per_s"] == pytest.approx(400)
    assert pred.loc[128, "samples_per_s"] <= 32 * 400 + 1e-6
    assert pred["input_bound"].tolist() == [False, False, True, True]
    assert pred.loc[2, "input_wait_s"] == 0.0


def test_a_node_efficiency_measured_in_a_results_tree_is_carried_beyond_the_node(dpsuite, tmp_path):
    root, node, out = tmp_path / "res", tmp_path / "node", tmp_path / "pred"
    write_runs(root)
    write_bench(root)
    one = TRUTH.step_s(1, trees.PER_WORKER)
    measured = TRUTH.efficiency(2, trees.PER_WORKER) / 2  # half what communication explains
    for workers, efficiency in ((1, 1.0), (2, measured)):
        speed = workers * efficiency * trees.PER_WORKER / one
        trees.write_run(node, workers=workers, samples_per_s=speed)
    args = ("--node-efficiency-from", str(node), "--workers", "1,2,4", "--out", str(out))
    assert dpsuite("predict", str(root), *args) == 0
    pred = pd.read_csv(out / "predictions.csv").set_index("workers")
    assert pred.loc[2, "efficiency"] == pytest.approx(measured, rel=1e-3)
    assert pred.loc[2, "overhead_s"] > 0
    assert pred.loc[4, "overhead_s"] == pytest.approx(pred.loc[2, "overhead_s"])
    assert "node efficiency" in pred.loc[4, "measured_terms"]
    assert dpsuite("predict", str(root), *args, "--measured-node-efficiency", "0.9") == 2


def test_flops_per_sample_is_never_guessed(dpsuite, tmp_path, capsys):
    root = tmp_path / "res"
    write_runs(root)  # runs without a FLOP count
    assert dpsuite("predict", "--profile", "dgx-h100", "--params", "25e6") == 2
    assert "FLOPs per sample unknown" in capsys.readouterr().err
    args = ("predict", str(root), "--profile", "dgx-h100", "--workload", "mnist1d_mlp")
    assert dpsuite(*args) == 2
    err = capsys.readouterr().err
    assert "FLOPs per sample unknown (mnist1d_mlp)" in err and "6 x parameters" in err
    assert dpsuite(*args, "--flops-per-sample", "3e6") == 0


def test_published_table(dpsuite, capsys):
    assert dpsuite("predict", "--published") == 0
    out = capsys.readouterr().out
    assert out.startswith(
        "| result | hardware | GPUs | data | published | bound | without NCCL's SMs "
        "| estimate or bound | points | terms |"
    )
    assert "| Horovod, VGG-16, 512 GPUs | `horovod-pascal-25gbe` | 512 | not stated | 68.0 %" in out
    assert "| `dgx1-v100` | 8 | dali-cpu @ 46ff3707 | 96.8 % |" in out
    assert "ring; 161 tensors, DDP buckets; NCCL's SMs 12/80; bound |" in out
    assert (
        "| gpu-resident @ ef98b2ce |" in out and "DDP buckets; NCCL's SMs 12/80; estimate |" in out
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("predict",), "give a results directory, or --profile with --workload or --params"),
        (("predict", "{tmp}/missing"), "results directory not found"),
        (("predict", "{tmp}"), "nothing to fit in"),
        (("predict", "--params", "1e6"), "give --profile"),
        (("predict", "--profile", "dgx-9000", "--params", "1e6"), "unknown profile 'dgx-9000'"),
        (("predict", "--profile", "dgx-h100", "--workload", "tiny_gpt"), "give the RESULTS_DIR"),
        (("predict", "{tmp}", "--profile", "dgx-h100", "--workload", "tiny_gpt"), "no runs of"),
        (("predict", "--profile", "dgx-h100", "--params", "-1"), "--params must be > 0"),
        (
            (
                "predict",
                "--profile",
                "horovod-pascal-25gbe",
                "--params",
                "1e6",
                "--nccl-channels",
                "56",
            ),
            "--nccl-channels must be from 1 to fewer than the 56 SMs",
        ),  # fmt: skip
        (("predict", "--published", "--nccl-channels", "2"), "--nccl-channels goes with --profile"),
        (
            ("predict", "{tmp}", "--profile", "dgx-h100", "--nccl-channels", "2"),
            "--nccl-channels goes with planning on a profile",
        ),
        # Used to end in a traceback (nan) or print inf ms and nan % (inf).
        (("predict", "--profile", "dgx-h100", "--params", "nan"), "must be a finite number"),
        (("predict", "--profile", "x", "--flops-per-sample", "inf"), "must be a finite number"),
        (
            (
                "predict",
                "--profile",
                "dgx-h100",
                "--params",
                "1e6",
                "--samples-per-s",
                "9",
                "--mfu",
                "0",
            ),
            "--mfu must be in (0, 1]",
        ),  # fmt: skip
        (
            (
                "predict",
                "--profile",
                "dgx-h100",
                "--params",
                "1e6",
                "--flops-per-sample",
                "9",
                "--precision",
                "fp8",
            ),
            "has no peak for fp8",
        ),  # fmt: skip
        (("predict", "--batch", "0"), "--batch and --max-workers must be >= 1"),
        ((*VGG_ON_HOROVOD, "--workers", "8,x"), "--workers: comma-separated whole numbers"),
        ((*VGG_ON_HOROVOD, "--workers", "0,8"), "worker counts must be >= 1"),
        ((*VGG_ON_HOROVOD, "--baseline-workers", "0"), "--baseline-workers must be >= 1"),
        ((*VGG_ON_HOROVOD, "--algorithms", "hierarchical"), "hierarchical not available"),
        ((*VGG_ON_HOROVOD, "--algorithms", "butterfly"), "unknown algorithm butterfly"),
        ((*VGG_ON_HOROVOD, "--nccl-version", "two"), "not a version"),
        ((*VGG_ON_HOROVOD, "--grad-dtype", "int8"), "invalid choice: 'int8'"),
        ((*VGG_ON_HOROVOD, "--measured-node-efficiency", "1.5"), "must be in (0, 1]"),
        ((*VGG_ON_HOROVOD, "--node-workers", "8"), "goes with --measured-node-efficiency"),
        ((*VGG_ON_HOROVOD, "--node-efficiency-from", "{tmp}"), "give --workload"),
        ((*VGG_ON_HOROVOD, "--node-efficiency-from", "{tmp}/nope"), "results directory not found"),
        ((*VGG_ON_HOROVOD, "--input-samples-per-s", "0"), "must be a finite number > 0"),
        ((*VGG_ON_HOROVOD, "--input-samples-per-s", "-5"), "must be a finite number > 0"),
        ((*VGG_ON_HOROVOD, "--input-samples-per-s", "nan"), "must be a finite number > 0"),
        ((*VGG_ON_HOROVOD, "--input-samples-per-s", "inf"), "must be a finite number > 0"),
        ((*VGG_ON_HOROVOD, "--input-samples-per-s", "fast"), "invalid float value"),
        (("predict", "--published", "--input-samples-per-s", "9"), "not --published"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(dpsuite, tmp_path, capsys, args, message):
    assert dpsuite(*(a.format(tmp=tmp_path) for a in args)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dpsuite: error: ") and message in err[0]


def test_runs_of_other_sync_strategies_are_left_out_of_the_fit(dpsuite, tmp_path):
    root, out = tmp_path / "res", tmp_path / "pred"
    write_runs(root)
    write_bench(root)
    # PowerSGD sends far fewer bytes: its 10x faster steps are not what the model describes.
    trees.write_run(root, workers=2, samples_per_s=1e6, sync="powersgd")
    assert dpsuite("predict", str(root), "--out", str(out)) == 0
    assert pd.read_csv(out / "validation.csv")["error_pct"].abs().max() < 1e-6


PLAN = ("predict", "--profile", "dgx-a100", "--params", "25e6", "--flops-per-sample", "12e9")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # Used to end in an OverflowError traceback.
        (
            (
                "predict",
                "--profile",
                "dgx-a100",
                "--params",
                "1e300",
                "--flops-per-sample",
                "1e300",
            ),
            "--params must be at most 1e+11",
        ),
        ((*PLAN, "--flops-per-sample", "1e300"), "--flops-per-sample must be at most 1e+18"),
        ((*PLAN, "--tflops", "1e9"), "--tflops must be at most 100000"),
        ((*PLAN, "--samples-per-s", "1e12"), "--samples-per-s must be at most 1e+09"),
        # Used to print an efficiency of 299.7 %.
        (
            (*PLAN, "--baseline-workers", "100000", "--workers", "8,64"),
            "--baseline-workers 100000 is more than the fewest workers predicted at (8)",
        ),
        ((*PLAN, "--baseline-workers", "8", "--max-workers", "4"), "more than --max-workers 4"),
        # Used to predict 125 million nodes, a 29-day step, and to drop the empty element.
        ((*PLAN, "--workers", "1000000000"), "worker counts must be at most 1,048,576"),
        ((*PLAN, "--max-workers", "1000000000"), "--max-workers must be at most 1,048,576"),
        ((*PLAN, "--batch", "1000000000000"), "--batch must be at most 1,048,576 (beyond any"),
        ((*PLAN, "--batch", "2000000"), "--batch must be at most 1,048,576"),
        ((*PLAN, "--batch", "1000000", "--samples-per-s", "1"), "more than a day"),
        ((*PLAN, "--workers", "8,,16"), "--workers: comma-separated whole numbers, got '8,,16'"),
        ((*PLAN, "--workers", "8,16,8"), "a worker count is given twice"),
        ((*PLAN, "--params", "0.5"), "--params is a count of parameters, a whole number"),
        ((*PLAN, "--params", "1000.5"), "a whole number"),
        ((*PLAN, "--bucket-mb", "0.0001"), "buckets (at most 100,000): give a larger --bucket-mb"),
        ((*PLAN, "--bucket-mb", "-1"), "--bucket-mb must be > 0"),
        # Used to print the table and exit 0.
        (
            ("predict", "/no/such/dir", "--published", "--workers", "abc", "--out", "{tmp}/d"),
            "--published takes no other arguments (it prints the published comparison): "
            "drop RESULTS_DIR, --out, --workers",
        ),
        (("predict", "--published", "--batch", "64"), "drop --batch"),
        # Used to end in a FileExistsError / FileNotFoundError traceback.
        ((*PLAN, "--out", "{tmp}/a-file"), "--out {tmp}/a-file: exists and is not a directory"),
        ((*PLAN, "--out", "{tmp}/a-file/sub"), "{tmp}/a-file is not a directory"),
    ],
)
def test_nonsense_is_refused_before_any_prediction(dpsuite, tmp_path, capsys, args, message):
    (tmp_path / "a-file").write_text("mine\n")
    assert dpsuite(*(a.format(tmp=tmp_path) for a in args)) == 2
    out, err = capsys.readouterr()
    err_lines = err.strip().splitlines()
    assert out == "" and len(err_lines) == 1, err
    assert err_lines[0].startswith("dpsuite: error: ")
    assert message.format(tmp=tmp_path) in err_lines[0]
    assert (tmp_path / "a-file").read_text() == "mine\n" and not (tmp_path / "d").exists()


def test_an_out_that_cannot_be_made_is_one_line_before_the_table(
    dpsuite, tmp_path, capsys, monkeypatch
):
    def refuse(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("pathlib.Path.mkdir", refuse)
    assert dpsuite(*PLAN, "--out", str(tmp_path / "new" / "pred")) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.strip().splitlines() == [
        f"dpsuite: error: --out {tmp_path}/new/pred: cannot make it: Permission denied"
    ]


def test_the_default_worker_counts_start_at_the_baseline(dpsuite, tmp_path):
    out = tmp_path / "pred"
    assert dpsuite(*PLAN, "--baseline-workers", "8", "--max-workers", "96", "--out", str(out)) == 0
    pred = pd.read_csv(out / "predictions.csv")
    assert pred["workers"].tolist() == [8, 16, 32, 64, 96]
    assert pred["efficiency"].iloc[0] == pytest.approx(1.0) and pred["efficiency"].max() <= 1.0
