"""dpsuite.engine.launch: when a complete result stands, and how an attempt replaces a result."""

from __future__ import annotations

import json

import pytest

from dpsuite.conf.compose import compose_config
from dpsuite.conf.run_spec import resolve
from dpsuite.engine.launch import Attempt, base_record, config_difference, reuse_blocker
from dpsuite.results.store import read_json
from tests.conftest import SMALL


@pytest.fixture
def spec(tmp_path):
    return resolve(compose_config([*SMALL, "train.max_steps=3", f"results_dir={tmp_path}"]))


def record_of(spec, status="complete", **config_changes) -> dict:
    rec = base_record(spec) | {"status": status}
    rec["config"] = json.loads(json.dumps(spec.config)) | config_changes
    return rec


def test_a_complete_result_of_the_same_config_on_this_machine_stands(spec):
    machine = base_record(spec)["hardware"]["machine_id"]
    assert reuse_blocker(spec, record_of(spec), machine) is None
    assert reuse_blocker(spec, None, machine) == "no result yet"
    assert reuse_blocker(spec, record_of(spec, "failed"), machine) == "the result there is failed"
    assert "another machine" in reuse_blocker(spec, record_of(spec), "0000dead")
    assert reuse_blocker(spec, record_of(spec), None) is None  # it runs elsewhere: not ours to say


def test_what_is_measured_or_recorded_must_match_and_where_it_went_need_not(spec):
    machine = base_record(spec)["hardware"]["machine_id"]
    moved = record_of(spec, results_dir="/elsewhere", cache_dir="/other", force=True)
    assert reuse_blocker(spec, moved, machine) is None
    peak = record_of(spec, hardware={"tag": None, "peak_tflops": 1.0})
    assert reuse_blocker(spec, peak, machine) == (
        "the result there differs: hardware.peak_tflops=1.0 there, None now"
    )
    noise = dict(spec.config["noise_scale"], every=2)
    assert "noise_scale.every=2 there" in reuse_blocker(
        spec, record_of(spec, noise_scale=noise), machine
    )


def test_config_difference_names_the_first_key():
    assert config_difference({"a": {"b": 1, "c": 2}}, {"a": {"b": 1, "c": 3}}) == (
        "a.c=2 there, 3 now"
    )
    assert config_difference({"results_dir": "x"}, {"results_dir": "y"}) is None


def test_an_attempt_writes_beside_a_kept_result_and_takes_its_place_only_when_it_ends(spec):
    run = spec.run_dir
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps(record_of(spec)))
    attempt = Attempt.beside(spec, record_of(spec))
    assert attempt.dir == run.parent / ".attempts" / spec.run_id and attempt.previous == "complete"
    attempt.dir.mkdir(parents=True)
    (attempt.dir / "run.json").write_text(json.dumps(record_of(spec, "failed")))
    assert attempt.settle("failed", spec.run_id) == "failed"
    assert json.loads((run / "run.json").read_text())["status"] == "complete", "kept"
    (attempt.dir / "run.json").write_text(json.dumps(record_of(spec, "diverged")))
    assert attempt.settle("diverged", spec.run_id) == "diverged"
    assert json.loads((run / "run.json").read_text())["status"] == "diverged", "replaced"
    assert not attempt.dir.exists() and not list(run.parent.glob(".attempts/*.replaced"))


def test_an_attempt_over_nothing_worth_keeping_writes_in_place(spec):
    assert Attempt.beside(spec, None).dir == spec.run_dir
    assert Attempt.beside(spec, record_of(spec, "failed")).dir == spec.run_dir


def test_the_forkserver_imports_ddp_and_the_workload_once_for_all_workers(monkeypatch, spec):
    """The launcher's forkserver imports what every worker would import again: torch, DDP's
    torch._dynamo, the worker's module and the workload's own imports (each names a module)."""
    import importlib.util
    import multiprocessing

    from dpsuite.engine.launch import _spawned, worker_imports
    from dpsuite.runtime import distributed
    from dpsuite.workloads import REGISTRY

    preloads: list[list[str]] = []
    monkeypatch.setattr(multiprocessing, "set_forkserver_preload", preloads.append)
    distributed.preload_for_forkserver(_spawned, worker_imports(spec.build_workload()))
    assert preloads == [
        [
            "torch",
            "dpsuite.engine.launch",
            "torch._dynamo",
            "dpsuite.workloads.mnist_1d",
        ]
    ]
    for cls in REGISTRY.values():
        for name in cls.worker_imports:
            top = name.split(".")[0]
            if importlib.util.find_spec(top) is not None:  # torchvision is an extra
                assert importlib.util.find_spec(name) is not None, (cls, name)


@pytest.mark.parametrize("processes", [1, 2])
def test_an_interrupt_before_the_ranks_take_over_still_marks_the_run(monkeypatch, spec, processes):
    """scancel's SIGTERM can land after `running` is written but before a rank has its own
    handler (a SLURM job was cancelled while it imported the training loop): run.json must
    still say `interrupted`, not stay `running` for the sweep to call the job's fate."""
    from dpsuite.engine import launch as launch_module
    from dpsuite.errors import Terminated

    def interrupted(*args, **kwargs):
        assert read_json(spec.run_dir / "run.json")["status"] == "running"
        raise Terminated()

    monkeypatch.setattr(launch_module, "run_rank", interrupted)
    monkeypatch.setattr(launch_module.distributed, "spawn_local", interrupted)
    monkeypatch.setattr(type(spec), "processes", processes)
    with pytest.raises(Terminated):
        launch_module.launch(spec)
    rec = read_json(spec.run_dir / "run.json")
    assert (rec["status"], rec["error"]) == ("failed", "interrupted")
