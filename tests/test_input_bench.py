"""`dpsuite input-bench`: the samples/s of a workload's input pipeline alone, stored as
results, drawn in the report and taken by `dpsuite predict` as the input rate."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from dpsuite import results
from dpsuite.analysis.report import build
from dpsuite.results import schema

NPY = "workload=tests.dataset_workloads:NpyRegression"
REFERENCE = Path(__file__).resolve().parents[1] / "results" / "reference" / "xeon-2core-cpu"


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dpsuite: error: "), err
    return err[0]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["ranks=0"], "ranks values must be integers >= 1"),
        (["data.loader_workers=one"], "data.loader_workers takes integers"),
        (["data.loader_workers=-1"], "data.loader_workers values must be integers >= 0"),
        (["workers=2"], "ranks=, not workers="),
        (["seed=1,2"], "only ranks= and data.loader_workers= take several values"),
        (["--batches", "0"], "--batches must be an integer >= 1"),
        (["workload=no_such_workload"], "no_such_workload"),
    ],
)
def test_bad_input_is_one_line(dpsuite, capsys, tmp_path, args, said):
    assert dpsuite("input-bench", f"results_dir={tmp_path}", *args) == 2
    assert said in one_error_line(capsys)
    assert not (tmp_path / "input_bench").exists()


def bench(dpsuite, tmp_path: Path, *overrides: str) -> Path:
    out = tmp_path / "res"
    code = dpsuite(
        "input-bench",
        NPY,
        f"workload.data_dir={tmp_path / 'npy'}",
        f"results_dir={out}",
        "batch.per_worker=8",
        *overrides,
        "--batches",
        "4",
        "--warmup",
        "1",
    )
    assert code == 0
    return out


def test_a_file_backed_pipeline_is_measured_per_loader_workers(dpsuite, capsys, tmp_path):
    out = bench(dpsuite, tmp_path, "data.loader_workers=0,1", "ranks=1")
    printed = capsys.readouterr().out
    assert "(datasets)" in printed and "# wrote " in printed
    rows = results.load_input_bench(out)
    assert list(rows["loader_workers"]) == [0, 1] and set(rows["ranks"]) == {1}
    assert (rows["samples_per_s"] > 0).all() and (rows["per_worker_batch"] == 8).all()
    assert (rows["samples_per_s"] == rows["samples_per_s_per_rank"]).all()
    assert set(rows["pipeline"]) == {"datasets"}
    assert list(rows.columns[: len(schema.INPUT_BENCH_ROWS)]) == schema.names(
        schema.INPUT_BENCH_ROWS
    )


@pytest.mark.multiproc
def test_two_ranks_read_their_shares_at_once(dpsuite, capsys, tmp_path):
    out = bench(dpsuite, tmp_path, "ranks=2")
    [row] = results.load_input_bench(out).to_dict("records")
    assert row["ranks"] == 2
    assert row["samples_per_s"] == pytest.approx(2 * row["samples_per_s_per_rank"])


def test_a_failing_sample_is_one_line(dpsuite, capsys, tmp_path):
    code = dpsuite(
        "input-bench",
        "workload=tests.dataset_workloads:Faulty",
        "workload.fault=raises",
        f"workload.data_dir={tmp_path / 'npy'}",
        f"results_dir={tmp_path}",
        "batch.per_worker=8",
        "--batches",
        "40",  # a whole epoch: sample 7 is in it
    )
    assert code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dpsuite: input-bench failed: "), err
    assert "sample 7" in err[0]
    assert not (tmp_path / "input_bench").exists()


@pytest.mark.slow  # 12 s: `nox -s stress`; the Datasets form is measured by default
def test_in_memory_data_measure_the_index_gather_once_per_rank_count(dpsuite, capsys, tmp_path):
    code = dpsuite(
        "input-bench", "data.loader_workers=0,2", f"results_dir={tmp_path}", "--batches", "3"
    )
    assert code == 0
    assert "in memory: loader_workers does not apply" in capsys.readouterr().out
    rows = results.load_input_bench(tmp_path)
    assert len(rows) == 1 and rows["pipeline"].iloc[0] == "in memory"


def write_bench(root: Path, workload: str, rate_per_rank: float) -> None:
    meta = {
        "bench_id": "m-bench",
        "workload": workload,
        "pipeline": "datasets",
        "device": "cpu",
        "batches": 10,
        "warmup": 1,
        "hardware": {"tag": "xeon-2core-cpu"},
    }
    rows = [
        {
            "ranks": 2,
            "loader_workers": w,
            "per_worker_batch": 32,
            "samples_per_s": 2 * rate_per_rank * (1 + w) / 2,
            "samples_per_s_per_rank": rate_per_rank * (1 + w) / 2,
            "batch_time_s": 32 / (rate_per_rank * (1 + w) / 2),
            "first_batch_s": 0.1,
        }
        for w in (0, 1)
    ]
    results.write_input_bench(root / "input_bench" / "m-bench", meta, rows)


def test_a_damaged_result_is_left_out_with_a_warning(tmp_path):
    write_bench(tmp_path, "w", 1000.0)
    csv = tmp_path / "input_bench" / "m-bench" / results.INPUT_BENCH_CSV
    csv.write_text(csv.read_text().replace("1000.0", "-5", 1))
    with pytest.warns(UserWarning, match="skipping unreadable input-bench result"):
        assert results.load_input_bench(tmp_path).empty


def test_the_report_draws_the_input_pipeline(tmp_path):
    write_bench(tmp_path, "npy_regression", 1000.0)
    written = build.build_report(tmp_path, tmp_path / "rep")
    md = (written.out / "index.md").read_text()
    assert "### Input pipeline" in md and "## Input pipeline" in md
    assert (
        "npy_regression on xeon-2core-cpu: the input pipeline gives 2,000 samples/s with 2 "
        "ranks (1,000 per rank, at 1 loader worker), 2.00× its rate without loader workers."
    ) in md
    assert (written.out / "input_pipeline.png").exists()


@pytest.fixture
def fitted_tree(tmp_path) -> Path:
    """Runs and comm-bench of one machine (copied: results/ is never written)."""
    root = tmp_path / "tree"
    shutil.copytree(REFERENCE, root / "xeon-2core-cpu")
    return root


def test_predict_takes_the_measured_input_rate(fitted_tree, capsys):
    from dpsuite.cli.main import main

    write_bench(fitted_tree, "mnist1d_mlp", 500.0)
    assert main(["predict", str(fitted_tree), "--workers", "1,2,4", "--batch", "32"]) == 0
    out = capsys.readouterr().out
    assert (
        "# mnist1d_mlp: input rate from input-bench m-bench: 1,000 samples/s with 2 ranks on "
        "the host (1 loader worker, 500 per rank): a step of 32 samples per worker cannot be "
        "faster than 64 ms"
    ) in out
    block = out.split("== xeon-2core-cpu / mnist1d_mlp", 1)[1].split("\n== ", 1)[0]
    assert "input: at most 1,000 samples/s per node" in block and "input-bound" in block
    other = out.split("== xeon-2core-cpu / mnist1d_cnn", 1)[1].split("\n== ", 1)[0]
    assert "input-bound" not in other  # its pipeline was not measured


def test_predict_input_rate_from_another_tree(fitted_tree, tmp_path, capsys):
    from dpsuite.cli.main import main

    elsewhere = tmp_path / "inputs"
    write_bench(elsewhere, "mnist1d_mlp", 500.0)
    args = ["predict", str(fitted_tree), "--workers", "1,2", "--input-rate-from"]
    assert main([*args, str(elsewhere)]) == 0
    assert "input rate from input-bench m-bench" in capsys.readouterr().out
    assert main([*args, str(tmp_path / "missing")]) == 2
    assert "--input-rate-from: results directory not found" in one_error_line(capsys)
    assert main([*args, str(elsewhere), "--input-samples-per-s", "10"]) == 2
    assert "not both" in one_error_line(capsys)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main([*args, str(empty)]) == 2
    assert "no input-bench result of" in one_error_line(capsys)
