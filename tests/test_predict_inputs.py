"""`dpsuite predict` told what was run: a tensor list (and dumping one), gradient accumulation,
overlap off, and a user's own table of measured scaling, each read strictly."""

from dataclasses import replace

import pandas as pd
import pytest
import yaml

from dpsuite import results
from dpsuite.analysis.scaling import allreduce_cost
from dpsuite.analysis.scaling.compute import ComputeModel
from dpsuite.analysis.scaling.model import MIB, ScalingModel
from dpsuite.analysis.scaling.published import PUBLISHED
from dpsuite.analysis.scaling.tensor_file import TensorList, dump_tensors, load_tensors
from dpsuite.analysis.scaling.topology import Link, Topology
from tests import report_trees as trees

MODEL = ScalingModel(
    Topology(Link(20e-6, 1.2e9)),
    ComputeModel(0.001, 2e-5, backward_fraction=2 / 3),
    grad_bytes=4 * 11_000_000,
    bucket_bytes=25 * MIB,
    library=allreduce_cost.Library(backend="gloo"),
)


def _error(capsys) -> str:
    return capsys.readouterr().err.strip()


# ---- the step as it was run -------------------------------------------------------------


def test_gradient_accumulation_runs_k_micro_batches_and_one_all_reduce():
    one, four = MODEL.step(4, 32), replace(MODEL, grad_accum=4).step(4, 32)
    assert four.compute_s == pytest.approx(4 * one.compute_s)
    assert four.comm_s == pytest.approx(one.comm_s)  # the gradients all-reduced once
    rows = replace(MODEL, grad_accum=4).predict([1, 4], 32)
    assert rows["samples_per_s"].iloc[1] == pytest.approx(4 * 32 * 4 / four.total_s)
    # the same communication over four times the compute: a smaller share of the step
    assert replace(MODEL, grad_accum=4).efficiency(4, 32) > MODEL.efficiency(4, 32)


def test_overlap_off_exposes_every_all_reduce():
    on, off = MODEL.step(4, 32), replace(MODEL, overlap=False).step(4, 32)
    assert on.exposed_s < on.comm_s  # the first bucket hides behind the backward pass
    assert off.exposed_s == pytest.approx(off.comm_s)
    assert off.total_s > on.total_s


def test_the_cli_passes_grad_accum_and_overlap(dpsuite, capsys):
    base = ["--profile", "dgx-a100", "--params", "25e6", "--samples-per-s", "1000"]
    base += ["--workers", "1,8", "--batch", "32"]
    assert dpsuite("predict", *base) == 0
    plain = capsys.readouterr().out
    assert dpsuite("predict", *base, "--grad-accum", "4", "--no-overlap") == 0
    changed = capsys.readouterr().out
    assert "   step: " not in plain
    assert "step: 4 micro-batches a step, gradients all-reduced once; no overlap" in changed
    assert dpsuite("predict", *base, "--grad-accum", "0") == 2
    assert "--grad-accum must be from 1" in _error(capsys)


# ---- tensor lists ------------------------------------------------------------------------


def test_a_tensor_list_round_trips_through_its_file(tmp_path):
    tensors = TensorList((10, 20, 30), (1.0, 0.0, 2.5), "mine", "by hand")
    path = tmp_path / "t.yaml"
    path.write_text(dump_tensors(tensors))
    assert load_tensors(path) == tensors


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("numels: [1, 2]\nnumels: [3]\n", "duplicate key numels"),
        ("numel: [1, 2]\n", "unknown key numel (did you mean numels?)"),
        ("numels: []\n", "numels must be a non-empty list"),
        ("numels: [1, 0]\n", "numels[1] must be a whole number >= 1, got 0"),
        ("numels: [1, 2.5]\n", "numels[1] must be a whole number"),
        ("numels: [1, 2]\nbackward_mflops: [1]\n", "backward_mflops must be a list of 2"),
        ("numels: [1, 2]\nbackward_mflops: [1, -1]\n", "backward_mflops[1] must be a finite"),
        ("[1, 2]\n", "a tensor list is a mapping"),
    ],
)
def test_a_bad_tensor_file_is_one_line_naming_the_problem(tmp_path, dpsuite, capsys, text, says):
    path = tmp_path / "t.yaml"
    path.write_text(text)
    assert dpsuite("predict", "--profile", "dgx-a100", "--tensors", str(path)) == 2
    err = _error(capsys)
    assert says in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_tensors_replace_the_parameter_count_when_planning(tmp_path, dpsuite, capsys):
    path = tmp_path / "t.yaml"
    path.write_text(dump_tensors(TensorList((4_000_000,) * 10)))  # 40 M parameters
    common = ["--profile", "dgx-a100", "--samples-per-s", "500", "--workers", "1,16"]
    assert dpsuite("predict", *common, "--tensors", str(path)) == 0
    out = capsys.readouterr().out
    assert "10 tensors in DDP's" in out and "152.6 MiB" in out
    assert dpsuite("predict", *common, "--tensors", str(path), "--params", "1e6") == 2
    assert "give --tensors or --params, not both" in _error(capsys)


def test_dump_tensors_from_a_run_and_from_a_workload(tmp_path, dpsuite, capsys):
    run = trees.write_run(tmp_path, workers=1, samples_per_s=100.0)
    rec = results.read_json(run / "run.json")
    rec["param_numels"] = [6, 4, 2]
    results.write_json_atomic(run / "run.json", rec)
    assert dpsuite("predict", "--dump-tensors", str(run)) == 0
    dumped = yaml.safe_load(capsys.readouterr().out)
    assert dumped["numels"] == [6, 4, 2]
    assert dpsuite("predict", "--dump-tensors", "workload=mnist1d_mlp") == 0
    built = yaml.safe_load(capsys.readouterr().out)
    assert built["workload"] == "mnist1d_mlp" and len(built["numels"]) >= 2
    assert dpsuite("predict", "--dump-tensors", "workload=no_such_thing") == 2
    assert "--dump-tensors workload=no_such_thing" in _error(capsys)
    assert dpsuite("predict", "--dump-tensors", str(tmp_path / "none")) == 2
    assert "cannot read" in _error(capsys)
    assert dpsuite("predict", "--dump-tensors", str(run), "--batch", "4") == 2
    assert "--dump-tensors takes no other arguments: drop --batch" in _error(capsys)


# ---- a user's own table --------------------------------------------------------------------

ENTRY = {
    "label": "my cluster, 16 GPUs",
    "published_efficiency": 0.85,
    "workers": 16,
    "baseline_workers": 1,
    "profile": "dgx-a100",
    "batch": 64,
    "single_gpu_samples_per_s": 900,
    "params": 25.6e6,
    "smaller_counts": {4: 0.95, 8: 0.9},
}


def test_a_users_table_is_predicted_and_scored(tmp_path, dpsuite, capsys):
    path = tmp_path / "mine.yaml"
    tensors = tmp_path / "t.yaml"
    tensors.write_text(dump_tensors(TensorList((1_000_000,) * 20)))
    second = {**ENTRY, "label": "with tensors", "tensors": "t.yaml", "workers": 8}
    del second["params"], second["smaller_counts"]
    path.write_text(yaml.safe_dump([ENTRY, second]))
    assert dpsuite("predict", "--published", str(path)) == 0
    out = capsys.readouterr().out
    assert "my cluster, 16 GPUs" in out and "with tensors" in out
    assert "20 tensors" in out  # the tensor file, named relative to the table
    assert "leave-last-out" in out and "| yours | 1 |" in out


def test_every_problem_of_a_users_table_is_its_own_line(tmp_path, dpsuite, capsys):
    bad = {**ENTRY, "workers": 0, "batchsize": 4, "published_efficiency": 1.5}
    del bad["batch"]
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump([ENTRY, bad, ENTRY]))
    assert dpsuite("predict", "--published", str(path)) == 2
    lines = _error(capsys).splitlines()
    assert all(line.startswith("dpsuite: error: --published") for line in lines)
    said = "\n".join(lines)
    for problem in (
        "entry 2 (my cluster, 16 GPUs): unknown key batchsize (did you mean batch?)",
        "entry 2 (my cluster, 16 GPUs): missing key batch",
        "workers must be a whole number >= 1, got 0",
        "published_efficiency must be in (0, 1], got 1.5",
        "entry 3 (my cluster, 16 GPUs): label given to an earlier entry too",
    ):
        assert problem in said
    assert len(lines) == 5 + 1  # the smaller counts no longer fit under workers 0


def test_a_rows_accumulation_and_overlap_reach_its_model(tmp_path, dpsuite, capsys):
    from dpsuite.analysis.scaling.published import published_model

    model = published_model({**ENTRY, "grad_accum": 4, "overlap": False, "bucket_mb": 25})
    assert model.grad_accum == 4 and model.overlap is False
    assert all(done == 1.0 for _, done in model.buckets())  # every bucket after the backward
    plain = published_model({**ENTRY, "bucket_mb": 25})
    assert plain.grad_accum == 1 and plain.overlap is True
    bad = {**ENTRY, "grad_accum": 0, "overlap": "no"}
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump([bad]))
    assert dpsuite("predict", "--published", str(path)) == 2
    said = _error(capsys)
    assert "grad_accum must be a whole number >= 1, got 0" in said
    assert "overlap must be true or false, got 'no'" in said


def test_the_shipped_table_passes_its_own_check():
    from dpsuite.analysis.scaling.published_file import load_published

    assert len(load_published(PUBLISHED)) == len(yaml.safe_load(PUBLISHED.read_text()))


# ---- the network as comm-bench measured it --------------------------------------------------


def test_comm_bench_results_replace_the_profiles_link_rates(tmp_path, dpsuite, capsys):
    from tests.test_predict import write_bench

    write_bench(tmp_path / "bench", world=4)  # 20 us a hop, 1.2 GB/s, on one node
    plan = ["--profile", "dgx-a100", "--params", "25e6", "--samples-per-s", "900"]
    plan += ["--workers", "1,16"]
    assert dpsuite("predict", *plan) == 0
    datasheet = capsys.readouterr().out
    assert "(datasheet: the profile's links)" in datasheet
    assert dpsuite("predict", *plan, "--comm-bench", str(tmp_path / "bench")) == 0
    measured = capsys.readouterr().out
    assert "1.2 GB/s" in measured and "1.2 GB/s" not in datasheet
    assert "measured: comm-bench on one node (the network: datasheet)" in measured
    assert dpsuite("predict", *plan, "--comm-bench", str(tmp_path / "none")) == 2
    assert "--comm-bench: results directory not found" in _error(capsys)
    (tmp_path / "empty").mkdir()
    assert dpsuite("predict", *plan, "--comm-bench", str(tmp_path / "empty")) == 2
    assert "no error-free multi-rank all-reduce results" in _error(capsys)


# ---- fitted to every count measured ---------------------------------------------------------


def test_predict_results_fits_its_terms_to_every_count(tmp_path, dpsuite, capsys):
    from dpsuite.analysis.scaling.model import Overheads
    from dpsuite.analysis.scaling.sync_cost import SyncCost
    from tests.test_predict import PARAMS, TRUTH, write_bench

    truth = replace(TRUTH, overheads=Overheads(sync=SyncCost(5e-3, 20.0, (2,))))
    root = tmp_path / "res"
    for workers in (1, 2, 4, 8):
        step = truth.step_s(workers, trees.PER_WORKER)
        run = trees.write_run(
            root, workers=workers, samples_per_s=workers * trees.PER_WORKER / step
        )
        rec = results.read_json(run / "run.json")
        rec.update(num_params=PARAMS, bucket_cap_mb=25.0)
        results.write_json_atomic(run / "run.json", rec)
    write_bench(root, world=2)
    write_bench(root, world=4)
    out = tmp_path / "pred"
    args = ["predict", str(root), "--workers", "1,8,64", "--out", str(out)]
    assert dpsuite(*args) == 0
    text = capsys.readouterr().out
    assert "synchronisation fitted at 2, 4, 8 workers" in text
    assert "leave-last-out on these runs: fitted at 2, 4 workers, 8 predicted" in text
    held = float(text.split("leave-last-out on these runs")[1].split("error ")[1].split(" %")[0])
    assert abs(held) < 1.0  # the term the runs were made with, found from 1, 2 and 4
    predictions = pd.read_csv(out / "predictions.csv").set_index("workers")
    assert predictions.loc[64, "step_time_s"] == pytest.approx(
        truth.step_s(64, trees.PER_WORKER), rel=1e-3
    )
