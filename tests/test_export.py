"""`dpsuite export parquet|tensorboard|wandb`: real runs (two of the reference results) read back
with pandas, TensorBoard's own event reader and W&B's offline run files; all offline."""

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


@pytest.mark.parametrize("fmt,package", [("tensorboard", "tensorboard"), ("wandb", "wandb")])
def test_a_missing_package_names_its_extra(dpsuite, tree, capsys, monkeypatch, fmt, package):
    monkeypatch.setitem(sys.modules, package, None)  # as if it were not installed
    assert dpsuite("export", fmt, str(tree)) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0, err  # the package is checked before anything is read
    assert err.startswith(f"dpsuite: error: dpsuite export {fmt} needs the {package} package")
    assert f"dpsuite[{package}]" in err


@pytest.mark.parametrize("fmt", ["parquet", "tensorboard", "wandb"])
def test_nothing_to_export_is_one_line(dpsuite, tmp_path, capsys, fmt):
    (tmp_path / "empty").mkdir()
    assert dpsuite("export", fmt, str(tmp_path / "empty")) == 2
    assert dpsuite("export", fmt, str(tmp_path / "missing")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("dpsuite: error: ") and "no runs to export" in err[0]
    assert err[1] == f"dpsuite: error: results directory not found: {tmp_path / 'missing'}"
