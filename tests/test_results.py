import json
import os
import socket

import pandas as pd
import pytest

from suite import results
from suite.errors import ResultsWriteError


def record(run_id: str, status: str = "complete", **extra) -> dict:
    return {
        "run_id": run_id,
        "status": status,
        "workload": "mnist1d_mlp",
        "workers": 2,
        "metrics": {"samples_per_s": 10.0, "final_eval_acc": 0.9},
        "hardware": {"tag": "box", "cpu": "x"},
        "config": {"a": 1},
        **extra,
    }


def test_writer_lifecycle(tmp_path):
    w = results.RunWriter(tmp_path / "r1")
    w.start({"run_id": "r1", "workload": "w"})
    assert results.read_json(w.run_json)["status"] == "running"
    w.append_epoch({"epoch": 1, "step": 10, "eval_acc": 0.5})
    w.append_epoch({"epoch": 2, "step": 20, "eval_acc": 0.6})
    w.finish("complete", metrics={"x": float("nan")})
    rec = results.read_json(w.run_json)
    assert rec["status"] == "complete" and rec["metrics"]["x"] is None  # strict JSON
    assert list(results.load_epochs(w.dir)["step"]) == [10, 20]
    assert oct(os.stat(w.run_json).st_mode & 0o777) == "0o644"
    assert not [p for p in w.dir.iterdir() if p.name.endswith(".tmp")]


def test_load_flattens_and_skips_corrupt(tmp_path):
    results.write_json_atomic(tmp_path / "a" / "run.json", record("a"))
    results.write_json_atomic(tmp_path / "b" / "run.json", record("b", status="diverged"))
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "run.json").write_text('{"run_id": "c", "sta')  # truncated
    with pytest.warns(UserWarning, match="c/run.json"):
        frame = results.load(tmp_path)
    assert sorted(frame["run_id"]) == ["a", "b"]
    assert {"samples_per_s", "final_eval_acc", "hardware.tag"} <= set(frame.columns)
    assert "config" not in frame.columns
    assert isinstance(frame, pd.DataFrame)


def test_nested_metrics_flatten_with_a_dotted_name(tmp_path):
    gns = {"final": 120.0, "mean": 80.0}
    rec = record("a", metrics={"samples_per_s": 1.0, "grad_noise_scale": gns})
    results.write_json_atomic(tmp_path / "a" / "run.json", rec)
    row = results.load(tmp_path).iloc[0]
    assert row["grad_noise_scale.final"] == 120.0 and row["grad_noise_scale.mean"] == 80.0


def test_epochs_written_before_noise_scale_columns_still_load(tmp_path):
    old_header = "epoch,step,samples_seen,lr,train_loss,eval_loss,eval_acc,wall_s\n"
    (tmp_path / "epochs.csv").write_text(old_header + "1,10,320,0.1,0.5,0.6,0.8,1.0\n")
    epochs = results.load_epochs(tmp_path)
    assert list(epochs.columns) == results.EPOCH_COLUMNS
    assert epochs["eval_acc"].tolist() == [0.8] and epochs["grad_noise_scale"].isna().all()


def test_stale_running_reads_as_failed(tmp_path):
    dead_pid = 2**22 + 12345  # above the default pid_max: no such process
    results.write_json_atomic(
        tmp_path / "x" / "run.json",
        record("x", status="running", pid=dead_pid, host=socket.gethostname()),
    )
    results.write_json_atomic(
        tmp_path / "y" / "run.json",
        record("y", status="running", pid=os.getpid(), host=socket.gethostname()),
    )
    frame = results.load(tmp_path).set_index("run_id")
    assert frame.loc["x", "status"] == "failed"
    assert frame.loc["y", "status"] == "running"
    assert results.load(tmp_path, include_incomplete=False).empty


def test_load_missing_dir(tmp_path):
    with pytest.raises(FileNotFoundError):
        results.load(tmp_path / "nope")


def test_run_id_is_stable_and_config_sensitive():
    s = {
        "workload": "w",
        "mode": "ddp",
        "workers": 2,
        "global_batch": 64,
        "lr_rule": "naive",
        "seed": 0,
    }
    a = results.make_run_id(s, {"x": 1, "y": [1, 2]})
    assert a == results.make_run_id(s, {"y": [1, 2], "x": 1})
    assert a != results.make_run_id(s, {"x": 2, "y": [1, 2]})
    assert a.startswith("w-ddp-w2-b64-naive-s0-")


def test_atomic_write_never_leaves_a_torn_file(tmp_path, monkeypatch):
    path = tmp_path / "run.json"
    results.write_json_atomic(path, {"run_id": "ok"})

    def boom(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(json, "dump", boom)
    with pytest.raises(ResultsWriteError, match="run.json: No space left on device"):
        results.write_json_atomic(path, {"run_id": "new"})
    assert results.read_json(path) == {"run_id": "ok"}
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]


def test_comm_bench_roundtrip_and_corrupt_file(tmp_path):
    rows = [
        {
            "size_bytes": 1024,
            "count": 256,
            "dtype": "float32",
            "time_us": 50.0,
            "algbw_GBps": 0.02,
            "busbw_GBps": 0.02,
            "errors": 0,
        }
    ]
    meta = {"bench_id": "b1", "world_size": 2, "backend": "gloo", "hardware": {"tag": "box"}}
    results.write_comm_bench(tmp_path / "comm_bench" / "b1", meta, rows)
    (tmp_path / "comm_bench" / "b2").mkdir()
    (tmp_path / "comm_bench" / "b2" / "comm_bench.json").write_text("{}")
    (tmp_path / "comm_bench" / "b2" / "comm_bench.csv").write_text("size_bytes\n1\n")
    with pytest.warns(UserWarning, match="b2"):
        frame = results.load_comm_bench(tmp_path)
    assert list(frame["bench_id"]) == ["b1"]
    assert frame.loc[0, "hardware.tag"] == "box" and frame.loc[0, "world_size"] == 2
    assert results.load(tmp_path).empty  # comm-bench results are not runs
