"""`dpsuite export parquet|tensorboard|wandb|mlflow`: real runs (two of the reference results)
read back with pandas and DuckDB, TensorBoard's own event reader, W&B's offline run files and
MLflow's client; all offline."""

from __future__ import annotations

import json
import shutil
import struct
import sys
from pathlib import Path

import pandas as pd
import pytest

from dpsuite import results
from tests.conftest import REPO

REFERENCE = REPO / "results" / "reference"


def first_run(sweep: str) -> tuple[str, str]:
    """(group, run id) of the first run of a reference sweep; the group is the run directory's
    parent, relative to the reference tree (a composite sweep's part is a level deeper)."""
    run_dir = min(p.parent for p in (REFERENCE / sweep).rglob("run.json"))
    return run_dir.parent.relative_to(REFERENCE).as_posix(), run_dir.name


# two machines' runs: the convergence study's and a scaling sweep's
RUNS = dict(first_run(sweep) for sweep in ("epyc-2core-cpu/convergence", "xeon-2core-cpu/scaling"))
COMM_BENCH = REFERENCE / "xeon-2core-cpu" / "comm_bench"


@pytest.fixture
def tree(tmp_path) -> Path:
    """Two runs of two sweeps and a comm-bench result, as the reference results hold them."""
    root = tmp_path / "results"
    for group, run_id in RUNS.items():
        shutil.copytree(REFERENCE / group / run_id, root / group / run_id)
    shutil.copytree(COMM_BENCH, root / "comm_bench")
    return root


def test_parquet_beside_the_results(dpsuite, tree, capsys):
    assert dpsuite("export", "parquet", str(tree)) == 0
    assert "wrote" in capsys.readouterr().out
    runs = pd.read_parquet(tree / "runs.parquet")
    assert sorted(runs["run_id"]) == sorted(RUNS.values())
    loaded = results.load(tree)
    assert runs["final_eval_acc"].tolist() == loaded["final_eval_acc"].tolist()
    epochs = pd.read_parquet(tree / "epochs.parquet")
    for group, run_id in RUNS.items():
        mine = epochs[epochs["run_id"] == run_id].drop(columns=["run_id", "group"])
        assert set(epochs.loc[epochs["run_id"] == run_id, "group"]) == {group}
        expected = results.load_epochs(tree / group / run_id).drop(columns=["run_id"])
        pd.testing.assert_frame_equal(mine.reset_index(drop=True), expected, check_dtype=False)
    bench = pd.read_parquet(tree / "comm_bench.parquet")
    assert len(bench) == len(results.load_comm_bench(tree))
    assert set(bench["collective"]) == set(results.load_comm_bench(tree)["collective"])


def event_reader(run_dir: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    reader = EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "tensors": 0})
    reader.Reload()
    return reader


def test_tensorboard_event_files_read_back(dpsuite, tree, tmp_path):
    pytest.importorskip("tensorboard", reason="the [tensorboard] extra is not installed")
    from tensorboard.plugins.hparams import plugin_data_pb2

    out = tmp_path / "tb"
    for _ in range(2):  # exporting again replaces, never appends
        assert dpsuite("export", "tensorboard", str(tree), "--out", str(out)) == 0
    for group, run_id in RUNS.items():
        run_dir = out / group / run_id  # one directory per sweep, one run per dpsuite run
        assert len(list(run_dir.glob("events.out.tfevents.*"))) == 1
        reader = event_reader(run_dir)
        epochs = results.load_epochs(tree / group / run_id)
        acc = reader.Scalars("epochs/eval_acc")
        assert [e.step for e in acc] == epochs["step"].astype(int).tolist()
        assert [e.value for e in acc] == pytest.approx(epochs["eval_acc"].tolist())
        record = results.read_json(tree / group / run_id / "run.json")
        final = reader.Scalars("final/final_eval_acc")[-1].value
        assert final == pytest.approx(record["metrics"]["final_eval_acc"])
        content = reader.PluginTagToContent("hparams")["_hparams_/session_start_info"]
        hparams = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info
        assert hparams.hparams["lr_rule.name"].string_value == record["lr_rule"]
        assert hparams.hparams["workers"].number_value == record["config"]["workers"]
        assert hparams.hparams["hardware.tag"].string_value == record["hardware"]["tag"]
        text = reader.Tensors("fingerprint/text_summary")[0].tensor_proto.string_val[0].decode()
        assert f"| cpu | {record['hardware']['cpu']} |" in text


def test_wandb_offline_runs(dpsuite, tree, tmp_path, monkeypatch):
    pytest.importorskip("wandb", reason="the [wandb] extra is not installed")
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wandb-cache"))
    out = tmp_path / "wb"
    for _ in range(2):  # exporting again replaces the runs' offline directories
        assert dpsuite("export", "wandb", str(tree), "--out", str(out)) == 0
    offline = sorted((out / "wandb").glob("offline-run-*"))
    assert len(offline) == len(RUNS)
    # W&B's run files hold the records as protobuf; the names written must be among them
    blobs = [next(d.glob("run-*.wandb")).read_bytes() for d in offline]
    for group, run_id in RUNS.items():
        (blob,) = [b for b in blobs if run_id.encode() in b]
        tag = results.read_json(tree / group / run_id / "run.json")["hardware"]["tag"]
        for name in (group, "epochs/eval_acc", "final_eval_acc", "lr_rule", tag):
            assert name.encode() in blob, name


def test_mlflow_runs_read_back_with_mlflows_client(dpsuite, tree, tmp_path, monkeypatch, capsys):
    """Params (the whole config), metric histories by step, final metrics, fingerprint tags and
    run.json, read back offline from a local store by MLflow's own client."""
    pytest.importorskip("mlflow", reason="the [mlflow] extra is not installed")
    from mlflow import MlflowClient

    from dpsuite.results.export.tree import flatten

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    store = tmp_path / "mlruns"
    for _ in range(2):  # exporting again replaces the runs, never adds copies
        assert dpsuite("export", "mlflow", str(tree), "--out", str(store)) == 0
    assert "wrote 2 runs to experiment dpsuite" in capsys.readouterr().out
    client = MlflowClient(tracking_uri=store.as_uri())
    experiment = client.get_experiment_by_name("dpsuite")
    mlruns = client.search_runs([experiment.experiment_id])
    assert sorted(r.info.run_name for r in mlruns) == sorted(RUNS.values())
    for group, run_id in RUNS.items():
        (mlrun,) = [r for r in mlruns if r.info.run_name == run_id]
        record = results.read_json(tree / group / run_id / "run.json")
        config = {k: "null" if v is None else str(v) for k, v in flatten(record["config"]).items()}
        assert {k: mlrun.data.params[k] for k in config} == config
        assert mlrun.data.params["global_batch"] == str(record["global_batch"])
        tags = mlrun.data.tags
        assert tags["hardware.tag"] == record["hardware"]["tag"]
        assert tags["hardware.machine_id"] == str(record["hardware"]["machine_id"])
        assert (tags["dpsuite.group"], tags["dpsuite.status"]) == (group, "complete")
        assert mlrun.info.status == "FINISHED"
        epochs = results.load_epochs(tree / group / run_id)
        history = client.get_metric_history(mlrun.info.run_id, "epochs/eval_acc")
        assert [(m.step, m.value) for m in sorted(history, key=lambda m: m.step)] == list(
            zip(epochs["step"].astype(int), epochs["eval_acc"].astype(float), strict=True)
        )
        steps = results.load_steps(tree / group / run_id)
        timed = client.get_metric_history(mlrun.info.run_id, "steps/step_time_s")
        assert len(timed) == steps["step_time_s"].notna().sum() > 0
        final = record["metrics"]["final_eval_acc"]
        assert mlrun.data.metrics["final/final_eval_acc"] == pytest.approx(final)
        artifacts = [a.path for a in client.list_artifacts(mlrun.info.run_id)]
        assert artifacts == ["run.json"]


def test_mlflow_attaches_a_report_and_fails_in_one_line(dpsuite, tree, tmp_path, capsys):
    pytest.importorskip("mlflow", reason="the [mlflow] extra is not installed")
    from mlflow import MlflowClient

    report = tmp_path / "report"
    report.mkdir()
    (report / "index.md").write_text("# report\n")
    store = tmp_path / "mlruns"
    args = ["export", "mlflow", str(tree), "--out", str(store), "--project", "mine"]
    assert dpsuite(*args, "--report", str(report)) == 0
    client = MlflowClient(tracking_uri=store.as_uri())
    (mlrun, _) = client.search_runs([client.get_experiment_by_name("mine").experiment_id])
    assert [a.path for a in client.list_artifacts(mlrun.info.run_id, "report")] == [
        "report/index.md"
    ]
    capsys.readouterr()
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the store would go")
    assert dpsuite("export", "mlflow", str(tree), "--out", str(blocked)) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("dpsuite: error: cannot export to MLflow"), err


def wandb_records(path: Path):
    """The records of a W&B run file (its LevelDB-style log of protobuf records: 32 KiB
    blocks, each record chunk with a 7-byte header; chunk kinds full, first, middle, last)."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    block, header = 32768, 7
    pos, pending = 7, b""
    while pos + header <= len(data):
        if block - pos % block < header:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + header])
        if kind == 0:
            break
        pending += data[pos + header : pos + header + length]
        pos += header + length
        if kind in (1, 4):  # full, or the last chunk of a record
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


def wandb_config(run_dir: Path) -> dict:
    config = {}
    for record in wandb_records(next(run_dir.glob("run-*.wandb"))):
        kind = record.WhichOneof("record_type")
        if kind in ("run", "config"):
            items = record.run.config.update if kind == "run" else record.config.update
            config.update({i.key: json.loads(i.value_json) for i in items})
    return config


def test_wandb_config_keeps_the_nested_config(dpsuite, tree, tmp_path, monkeypatch):
    """Every key of the composed config, nested groups included, read back from the offline
    run as a dotted key with its value; W&B filters on these."""
    pytest.importorskip("wandb", reason="the [wandb] extra is not installed")
    from dpsuite.results.export.tree import flatten

    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wandb-cache"))
    out = tmp_path / "wb"
    assert dpsuite("export", "wandb", str(tree), "--out", str(out)) == 0
    for group, run_id in RUNS.items():
        record = results.read_json(tree / group / run_id / "run.json")
        (run_dir,) = [
            d
            for d in (out / "wandb").glob("offline-run-*")
            if wandb_config(d).get("run_id") == run_id
        ]
        config = wandb_config(run_dir)
        for key in ("workload.num_samples", "workload.base_lr", "lr_rule.name", "batch.per_worker"):
            assert key in config, key
        if record["config"]["lr_rule"]["name"] == "linear_warmup":
            assert config["lr_rule.warmup_epochs"] == record["config"]["lr_rule"]["warmup_epochs"]
        expected = flatten(record["config"])
        assert {k: config[k] for k in expected} == expected
        assert config["global_batch"] == record["global_batch"]


def test_a_copied_run_is_not_exported_twice(dpsuite, tree, capsys):
    group, run_id = next(iter(RUNS.items()))
    shutil.copytree(tree / group / run_id, tree / group / "copy-of-a-run")
    assert dpsuite("export", "parquet", str(tree)) == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if "copy-of-a-run" in line]
    assert len(warned) == 1 and warned[0].startswith("dpsuite: warning: skipping")
    assert sorted(pd.read_parquet(tree / "runs.parquet")["run_id"]) == sorted(RUNS.values())
    assert set(pd.read_parquet(tree / "epochs.parquet")["run_id"]) == set(RUNS.values())


@pytest.mark.parametrize(
    "fmt,package", [("tensorboard", "tensorboard"), ("wandb", "wandb"), ("mlflow", "mlflow")]
)
def test_a_missing_package_names_its_extra(dpsuite, tree, capsys, monkeypatch, fmt, package):
    monkeypatch.setitem(sys.modules, package, None)  # as if it were not installed
    assert dpsuite("export", fmt, str(tree)) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0, err  # the package is checked before anything is read
    assert err.startswith(f"dpsuite: error: dpsuite export {fmt} needs the {package} package")
    assert f"dpsuite[{package}]" in err


@pytest.mark.parametrize("fmt", ["parquet", "tensorboard", "wandb", "mlflow"])
def test_nothing_to_export_is_one_line(dpsuite, tmp_path, capsys, fmt):
    (tmp_path / "empty").mkdir()
    assert dpsuite("export", fmt, str(tmp_path / "empty")) == 2
    assert dpsuite("export", fmt, str(tmp_path / "missing")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("dpsuite: error: ") and "no runs to export" in err[0]
    assert err[1] == f"dpsuite: error: results directory not found: {tmp_path / 'missing'}"


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


def test_parquet_out_leaves_the_results_untouched_and_names_are_sql_friendly(
    dpsuite, tree, tmp_path
):
    import pyarrow.parquet as pq

    before = snapshot(tree)
    for path in (tree, *[p for p in tree.rglob("*") if p.is_dir()]):
        path.chmod(0o555)  # read-only (root ignores it: the snapshot checks instead)
    try:
        assert dpsuite("export", "parquet", str(tree), "--out", str(tmp_path / "pq")) == 0
    finally:
        for path in (tree, *[p for p in tree.rglob("*") if p.is_dir()]):
            path.chmod(0o755)
    assert snapshot(tree) == before
    runs = pq.read_table(tmp_path / "pq" / "runs.parquet")
    assert not [name for name in runs.schema.names if "." in name]
    assert "config__workload__name" in runs.schema.names
    loaded = results.load(tree)
    assert runs.column("config__workload__name").to_pylist() == list(loaded["config.workload.name"])
    # units survive the renaming
    assert runs.schema.field("step_time_s").metadata[b"unit"] == b"s"


def test_duckdb_over_a_nested_tree_counts_each_run_once(dpsuite, tree, capsys):
    """A sweep exported on its own, then the whole tree: a glob over both would read the
    sweep's runs twice, so the second export is refused until the first is removed; exporting
    the sweep again after the root is refused the same way."""
    duckdb = pytest.importorskip("duckdb", reason="the [dev] extra is not installed")
    sweep = tree / next(iter(RUNS))
    assert dpsuite("export", "parquet", str(sweep)) == 0
    assert dpsuite("export", "parquet", str(tree)) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"{sweep / 'runs.parquet'} is an earlier export" in err
    assert not (tree / "runs.parquet").exists()

    for name in ("runs", "epochs", "steps"):
        (sweep / f"{name}.parquet").unlink()
    assert dpsuite("export", "parquet", str(tree)) == 0
    assert dpsuite("export", "parquet", str(sweep)) == 2  # the root's export holds its run
    assert "is an earlier export of 1 of these runs" in capsys.readouterr().err
    glob = (tree / "**" / "runs.parquet").as_posix()
    counted = duckdb.sql(f"select count(*), count(distinct run_id) from read_parquet('{glob}')")
    assert counted.fetchall() == [(len(RUNS), len(RUNS))]
    # the config is queried without quoting
    names = duckdb.sql(
        f"select distinct config__workload__name from read_parquet('{glob}')"
    ).fetchall()
    assert {n for (n,) in names} == set(results.load(tree)["config.workload.name"])
