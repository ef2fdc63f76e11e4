import os
import socket
import threading
from datetime import datetime, timedelta, timezone

import pandas as pd
import pytest

from dpsuite import results
from dpsuite.errors import ResultsWriteError
from dpsuite.results import liveness


def put(root, seed: int, status: str = "complete", **extra) -> str:
    """Write a trusted run.json (its config hashes to its id) below ``root``; its run id."""
    rec = consistent_record(seed)
    rec.update(
        status=status,
        metrics={"samples_per_s": 10.0, "final_eval_acc": 0.9},
        hardware={"tag": "box", "cpu": "x"},
    )
    rec.update(extra)
    rec["config"]["a"] = 1
    rec["run_id"] = results.make_run_id(rec, results.run_identity(rec["config"], 2, 64))
    results.write_json_atomic(root / rec["run_id"] / "run.json", rec)
    return rec["run_id"]


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
    ids = [put(tmp_path, 0), put(tmp_path, 1, status="diverged")]
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "run.json").write_text('{"run_id": "c", "sta')  # truncated
    with pytest.warns(UserWarning, match="c/run.json"):
        frame = results.load(tmp_path)
    assert sorted(frame["run_id"]) == sorted(ids)
    assert {"samples_per_s", "final_eval_acc", "hardware.tag", "config.a"} <= set(frame.columns)
    assert "config" not in frame.columns and set(frame["config.a"]) == {1}
    assert isinstance(frame, pd.DataFrame)


def test_one_column_per_quantity(tmp_path):
    """A metric that is a mapping always gives its sub-columns (empty when not measured), never
    also a column of its own; lists (a histogram) stay in run.json, not in column names."""
    histogram = {"wire_bytes_histogram": [[315_432, 40], [1_000, 2]]}
    measured = {"samples_per_s": 1.0, "grad_noise_scale": {"final": 9.0}, **histogram}
    a = put(tmp_path, 0, metrics=measured)
    b = put(tmp_path, 1, metrics={"samples_per_s": 1.0, "grad_noise_scale": None})
    frame = results.load(tmp_path).set_index("run_id")
    assert "grad_noise_scale" not in frame.columns
    assert frame.loc[a, "grad_noise_scale.final"] == 9.0
    assert pd.isna(frame.loc[b, "grad_noise_scale.final"])
    assert not [c for c in frame.columns if "histogram" in c or "315432" in c]


def consistent_record(run_id_seed: int = 0) -> dict:
    """A record of this schema version whose config hashes to its run id, as a run writes it."""
    config = {"workers": 2, "seed": run_id_seed, "workload": {"name": "mnist1d_mlp"}}
    summary = {
        "workload": "mnist1d_mlp",
        "mode": "ddp",
        "workers": 2,
        "global_batch": 64,
        "lr_rule": "naive",
        "seed": run_id_seed,
    }
    run_id = results.make_run_id(summary, results.run_identity(config, 2, 64))
    return {
        "schema_version": results.SCHEMA_VERSION,
        "run_id": run_id,
        "status": "complete",
        **summary,
        "config": config,
        "metrics": {"samples_per_s": 1.0},
    }


def test_copied_duplicated_and_edited_runs_are_left_out(tmp_path):
    good = consistent_record(0)
    results.write_json_atomic(tmp_path / good["run_id"] / "run.json", good)
    results.write_json_atomic(tmp_path / "copy-of-it" / "run.json", good)  # another name
    results.write_json_atomic(tmp_path / "sub" / good["run_id"] / "run.json", good)  # twice
    edited = consistent_record(1)
    edited["config"]["seed"] = 7  # hand-edited: no longer the config its id was made from
    results.write_json_atomic(tmp_path / edited["run_id"] / "run.json", edited)
    with pytest.warns(UserWarning) as caught:
        frame = results.load(tmp_path)
    assert list(frame["run_id"]) == [good["run_id"]]
    messages = " ".join(str(w.message) for w in caught)
    assert "copy-of-it/run.json: its run_id" in messages
    assert "was already read from another directory" in messages
    assert "does not hash to its run id" in messages


def test_epochs_and_steps_of_every_run_below_a_directory(tmp_path):
    names = []
    for seed in (1, 2):
        rec = consistent_record(seed)
        w = results.RunWriter(tmp_path / "sweep" / rec["run_id"])
        w.start(rec)
        w.append_epoch({"epoch": 1, "step": 10, "eval_acc": 0.5})
        w.write_steps([{"step": 3, "step_time_s": 0.1}])
        names.append(rec["run_id"])
    epochs = results.load_epochs(tmp_path)
    assert sorted(epochs["run_id"]) == sorted(names) and list(epochs["step"]) == [10, 10]
    assert list(results.load_steps(tmp_path / "sweep" / names[0])["run_id"]) == names[:1]


def test_nested_metrics_flatten_with_a_dotted_name(tmp_path):
    gns = {"final": 120.0, "mean": 80.0}
    put(tmp_path, 0, metrics={"samples_per_s": 1.0, "grad_noise_scale": gns})
    row = results.load(tmp_path).iloc[0]
    assert row["grad_noise_scale.final"] == 120.0 and row["grad_noise_scale.mean"] == 80.0


def test_epochs_written_before_noise_scale_columns_still_load(tmp_path):
    old_header = "epoch,step,samples_seen,lr,train_loss,eval_loss,eval_acc,wall_s\n"
    (tmp_path / "epochs.csv").write_text(old_header + "1,10,320,0.1,0.5,0.6,0.8,1.0\n")
    epochs = results.load_epochs(tmp_path)
    assert list(epochs.columns) == [*results.EPOCH_COLUMNS, "run_id"]
    assert epochs["eval_acc"].tolist() == [0.8] and epochs["grad_noise_scale"].isna().all()


def test_stale_running_reads_as_failed(tmp_path):
    dead_pid = 2**22 + 12345  # above the default pid_max: no such process
    x = put(tmp_path, 0, status="running", pid=dead_pid, host=socket.gethostname())
    y = put(tmp_path, 1, status="running", pid=os.getpid(), host=socket.gethostname())
    frame = results.load(tmp_path).set_index("run_id")
    assert frame.loc[x, "status"] == "failed"
    assert frame.loc[y, "status"] == "running"
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

    monkeypatch.setattr(os, "fsync", boom)  # the disk fills while the new file is written
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


def test_a_running_record_with_an_old_heartbeat_reads_as_failed_whoever_has_its_pid(tmp_path):
    """The pid is alive (this test's own: a pid reused by an unrelated process), but nothing
    has written the record since 2020: that run is dead. A fresh heartbeat is a live run."""
    here = {"status": "running", "pid": os.getpid(), "host": socket.gethostname()}
    old = put(tmp_path, 0, **here, heartbeat_at="2020-01-01T00:00:00+00:00")
    fresh = put(tmp_path, 1, **here, heartbeat_at=results.now_iso())
    elsewhere = put(tmp_path, 2, **{**here, "host": "node7"}, heartbeat_at="2020-01-01T00:00:00")
    frame = results.load(tmp_path).set_index("run_id")
    assert frame.loc[old, "status"] == "failed"
    assert frame.loc[fresh, "status"] == "running"
    assert frame.loc[elsewhere, "status"] == "failed", "another host's record: heartbeat alone"
    assert results.read_status(tmp_path / old) == "failed"


def test_the_limit_is_the_documented_margin_over_the_heartbeat():
    now = datetime.now(timezone.utc)
    rec = {"status": "running", "pid": os.getpid(), "host": socket.gethostname()}

    def at(age_s: float) -> str:
        beat = (now - timedelta(seconds=age_s)).isoformat()
        return results.effective_status({**rec, "heartbeat_at": beat}, now=now)

    assert liveness.STALE_AFTER_S >= 10 * liveness.HEARTBEAT_S
    assert at(liveness.STALE_AFTER_S - 1) == "running"
    assert at(liveness.STALE_AFTER_S + 1) == "failed"
    assert at(-300) == "running", "a clock ahead on the writer's node is no death"


def test_the_writer_beats_while_running_and_stops_with_the_block(tmp_path):
    class Counting:
        def __init__(self) -> None:
            self.beats, self.seen = 0, threading.Event()

        def beat(self) -> None:
            self.beats += 1
            self.seen.set()

    counting = Counting()
    with liveness.keep_beating(counting, every_s=0.001):
        assert counting.seen.wait(30)
    assert not any(t.name == "dpsuite-heartbeat" for t in threading.enumerate()), "joined"

    w = results.RunWriter(tmp_path / "r")
    w.start(consistent_record(0))
    w.record["heartbeat_at"] = "2020-01-01T00:00:00+00:00"
    w.beat()
    assert results.read_json(w.run_json)["heartbeat_at"] > "2020"
    w.finish("failed", error="x")
    w.beat()  # after the final status: nothing written
    assert results.read_json(w.run_json)["status"] == "failed"
    assert results.read_json(w.run_json)["heartbeat_at"] == w.record["heartbeat_at"]
