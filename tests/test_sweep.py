"""Sweeps: presets, manifest, failure isolation and resume after Ctrl-C or SIGKILL."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dpsuite import results
from dpsuite.conf.compose import plan
from dpsuite.workloads.cifar_resnet import RECORD_BYTES, TEST_FILE, TRAIN_FILES
from tests.conftest import REPO, read_run


def manifest(results_dir: Path) -> dict:
    return json.loads((results_dir / "sweep.json").read_text())


def run_dirs(results_dir: Path) -> list[Path]:
    return [p.parent for p in results_dir.rglob("run.json")]


# ---- presets ----------------------------------------------------------------------------------


def test_presets_expand_to_their_grids(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # checking a preset creates its (relative) results directory
    scaling = plan(["+sweep=scaling"], multirun=True).specs
    workloads = ("mnist1d_mlp", "mnist1d_cnn", "cifar_resnet", "tiny_gpt")
    assert len(scaling) == 32 * 3  # every point repeated three times
    rows = [s.summary() for s in scaling]
    assert {(r["workload"], r["workers"], r["per_worker_batch"], r["repeat"]) for r in rows} == {
        (w, n, b, r) for w in workloads for n in (1, 2, 4, 8) for b in (32, 128) for r in (0, 1, 2)
    }
    assert {(s.cfg.mode, s.cfg.train.max_steps) for s in scaling} == {("ddp", 200)}
    conv = plan(["+sweep=convergence_budget"], multirun=True).specs
    assert len(conv) == 7 * 4 * 3
    assert sorted({s.global_batch for s in conv}) == [32 * 2**k for k in range(7)]
    assert {s.cfg.lr_rule.name for s in conv} == {"naive", "linear", "linear_warmup", "sqrt"}
    r = conv[0].summary()
    assert (r["mode"], r["per_worker_batch"], r["epochs"], r["schedule"]) == (
        "simulated",
        32,
        5,
        "cosine",
    )
    assert (r["base_lr"], r["base_batch"], conv[0].cfg.workload.num_samples) == (0.1, 32, 50000)
    warm = {
        x.global_batch: x.summary()["warmup_epochs"]
        for x in conv
        if x.cfg.lr_rule.name == "linear_warmup"
    }
    assert warm == {b: 0.0 if b == 32 else 1.0 for b in warm}  # at the base batch: no rise
    assert {x.cfg.results_dir for x in conv} == {"results/convergence_budget"}


@pytest.mark.slow  # `nox -s stress`: the preset's grid is checked by its config tests
def test_the_convergence_preset_runs_a_fixed_budget_and_a_steps_to_target_study(
    monkeypatch, tmp_path
):
    from dpsuite.sweep.runner import planned

    monkeypatch.chdir(tmp_path)
    parts = {s.label: s for s in planned("convergence", [], writing=False)}
    assert {k: len(s.specs) for k, s in parts.items()} == {
        "convergence_budget": 7 * 4 * 3,
        "convergence_target_baseline": 5,  # batch 32: every rule is the recipe, one stands for all
        "convergence_target": 6 * 4 * 3,
        "convergence_oracle_base": 6 * 5,  # the base LR 0.1 is the baseline's runs
        "convergence_oracle_small": 3 * 7 * 3,
        "convergence_oracle_large": 3 * 7 * 5,  # around the critical batch: 5 seeds
        "convergence_oracle_small_no_warmup": 3 * 3 * 3,  # warmup as its own axis
        "convergence_oracle_large_no_warmup": 3 * 3 * 3,
    }
    target = [
        s for k, part in parts.items() if k != "convergence_budget" for s in part.specs.values()
    ]
    assert {
        (s.cfg.train.stop_at_target, s.target_acc, s.cfg.train.epochs, s.cfg.train.target_evals)
        for s in target
    } == {(True, 0.75, 16, 3)}
    assert {s.cfg.workload.validation_samples for s in target} == {5000}
    assert {s.cfg.optimizer.momentum for s in target} == {0.9}  # only the LR is tuned
    grid = {
        (s.global_batch, s.peak_lr)
        for k in ("convergence_oracle_base", "convergence_oracle_small", "convergence_oracle_large")
        for s in parts[k].specs.values()
    }
    lrs = {b: sorted(lr for bb, lr in grid if bb == b) for b, _ in grid}
    # sqrt(2) steps around each batch's best: 0.05 at 32, 0.141-0.283 at 64-256, 0.8 above
    assert lrs[32] == [0.0125, 0.025, 0.035, 0.05, 0.071, 0.2]
    assert lrs[256] == [0.05, 0.1, 0.141, 0.2, 0.283, 0.4, 0.8]
    assert lrs[2048] == [0.2, 0.4, 0.566, 0.8, 1.131, 1.6, 3.2]
    warm = {s.peak_lr: s.warmup_epochs for s in parts["convergence_oracle_small"].specs.values()}
    up = {0.141: 1.0, 0.2: 1.0, 0.283: 1.0, 0.4: 1.0, 0.8: 1.0}
    assert warm == {0.05: 0.0, 0.1: 0.0, **up}  # up from 0.1 only
    cold = {
        (s.global_batch, s.peak_lr): s.warmup_epochs
        for k in ("convergence_oracle_small_no_warmup", "convergence_oracle_large_no_warmup")
        for s in parts[k].specs.values()
    }
    assert set(cold.values()) == {0.0}  # each a twin of a warmup setting of the grid
    assert set(cold) <= grid and {lr for _, lr in cold} == {0.141, 0.2, 0.283, 0.566, 0.8, 1.131}
    assert not (tmp_path / "results").exists(), "planning alone creates nothing"


def test_command_line_replaces_a_preset_axis(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    specs = plan(["+sweep=convergence_budget", "seed=0", "workers=1,64"], multirun=True).specs
    assert len(specs) == 2 * 4
    assert {s.cfg.seed for s in specs} == {0} and {s.global_batch for s in specs} == {32, 2048}


def test_the_grid_recorded_is_the_one_that_runs(monkeypatch, tmp_path):
    """A command-line axis replaces the preset's in the grid (sweep.json, --help), and a
    command-line list is an axis of its own."""
    monkeypatch.chdir(tmp_path)
    args = ["+sweep=scaling", "workers=1,2", "workload=mnist1d_mlp", "seed=3,4"]
    ran = plan(args, multirun=True, writing=False)
    assert ran.grid == {
        "workload": "mnist1d_mlp",
        "workers": "1,2",
        "batch.per_worker": "32,128",
        "repeat": "0,1,2",
        "seed": "3,4",
    }
    assert len(ran.specs) == 2 * 2 * 3 * 2
    assert plan(["workers=2"], multirun=False, writing=False).grid == {}


def test_a_run_s_expected_steps_come_from_its_config(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    [spec] = plan(["workload.num_samples=2000", "workers=2", "train.epochs=3"], False).specs
    per_epoch = spec.train_samples // spec.global_batch
    timing = spec.cfg.timing.warmup_steps + spec.cfg.timing.calibration_steps
    assert spec.train_samples > 0 and spec.expected_steps == 3 * per_epoch + timing
    [capped] = plan(["workload.num_samples=2000", "train.max_steps=7"], False).specs
    assert capped.expected_steps == 7 + timing


def test_preset_run_ids_equal_the_same_plain_run(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    preset = {s.run_id for s in plan(["+sweep=convergence_budget", "seed=0"], multirun=True).specs}
    plain = plan(
        [
            "mode=simulated",
            "workers=4",
            "lr_rule=sqrt",
            "seed=0",
            "workload.num_samples=50000",
            "workload.base_lr=0.1",
            "workload.base_batch=32",
            "train.epochs=5",
        ],
        multirun=False,
    ).specs[0]
    assert plain.run_id in preset


def test_unknown_preset_and_bad_point_fail_before_work(dpsuite, tmp_path, capsys):
    assert dpsuite("sweep", "nosuch") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("dpsuite: error: unknown sweep 'nosuch'") and "convergence" in err
    out = tmp_path / "res"
    assert dpsuite("sweep", "convergence", "workers=1,0", f"results_dir={out}") == 2
    assert "workers must be an integer >= 1" in capsys.readouterr().err
    assert not run_dirs(out)
    assert dpsuite("run", "-m", "+sweep=demo") == 2
    assert "dpsuite sweep NAME" in capsys.readouterr().err


# ---- failure isolation ------------------------------------------------------------------------


def plant_damaged_cifar(root: Path) -> Path:
    """A local CIFAR-10 copy whose files are there but damaged (a byte too many each): the
    check before the sweep passes, the run that reads it fails while loading data."""
    root.mkdir(parents=True, exist_ok=True)
    record = bytes([3]) + bytes(RECORD_BYTES - 1)
    for name in [*TRAIN_FILES, TEST_FILE]:
        (root / name).write_bytes(record * 41 + b"x")
    return root


TINY_RESNET = ["workload=cifar_resnet", "workload.width=4", "workload.num_samples=200"]


def test_sweep_goes_on_past_failing_and_diverging_runs(dpsuite, tmp_path, capsys):
    bad = plant_damaged_cifar(tmp_path / "cifar")
    out = tmp_path / "res"
    args = [
        "run",
        "-m",
        *TINY_RESNET,
        "mode=simulated",
        "workers=2",
        "lr_rule=linear",
        f"workload.data_root=null,{bad}",
        "workload.base_lr=0.05,1e12",
        "train.epochs=2",
        f"results_dir={out}",
    ]
    assert dpsuite(*args) == 1  # the sweep ran to the end, and says that something failed
    by_status = results.load(out)["status"].value_counts().to_dict()
    assert by_status == {"failed": 2, "complete": 1, "diverged": 1}
    m = manifest(out)
    assert m["state"] == "finished" and m["counts"] == {"failed": 2, "complete": 1, "diverged": 1}
    assert len(m["run_ids"]) == 4 and set(m["runs"].values()) == {"failed", "complete", "diverged"}
    # as Hydra spells the values it ran
    assert m["grid"] == {
        "workload.data_root": f"null,{bad}",
        "workload.base_lr": "0.05,1000000000000.0",
    }
    captured = capsys.readouterr()
    assert "sweep multirun finished: 4 runs: 1 complete, 1 diverged, 2 failed" in captured.out
    failed = [read_run(d) for d in run_dirs(out) if read_run(d)["status"] == "failed"]
    assert all("is not a CIFAR-10 binary batch" in r["error"] for r in failed), failed

    # Rerun: the complete run is skipped, the others run again (and fail or diverge again).
    assert dpsuite(*args) == 1
    assert "1 diverged, 2 failed, 1 skipped" in capsys.readouterr().out
    assert manifest(out)["counts"] == {"failed": 2, "skipped": 1, "diverged": 1}


@pytest.mark.multiproc
def test_failing_multi_process_run_does_not_stop_the_sweep(dpsuite, tmp_path):
    bad = plant_damaged_cifar(tmp_path / "cifar")
    out = tmp_path / "res"
    code = dpsuite(
        "run",
        "-m",
        *TINY_RESNET,
        "workers=2",
        "batch.per_worker=8",
        "threads_per_worker=1",
        f"workload.data_root=null,{bad}",
        "train.max_steps=6",
        f"results_dir={out}",
    )
    assert code == 1
    frame = results.load(out)
    assert sorted(frame["status"]) == ["complete", "failed"]
    (error,) = frame.loc[frame["status"] == "failed", "error"]
    assert "is not a CIFAR-10 binary batch" in error


# ---- resume -----------------------------------------------------------------------------------

RESUME_SWEEP = [
    "-m",
    "dpsuite",
    "run",
    "-m",
    "mode=simulated",
    "workers=1,2,4",
    "seed=0,1",
    "workload.num_samples=3000",
    "train.epochs=4",
    "train.evals_per_epoch=2",
    "train.save_params=true",
]


def start_sweep(out: Path, cache: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "DPSUITE_CACHE_DIR": str(cache)}
    return subprocess.Popen(
        [sys.executable, *RESUME_SWEEP, f"results_dir={out}"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, like a terminal job
    )


def statuses(out: Path) -> list[str]:
    found = []
    for d in run_dirs(out):
        with contextlib.suppress(OSError, ValueError):  # a run directory just being created
            found.append(read_run(d)["status"])
    return found


def interrupt_after(proc: subprocess.Popen, out: Path, complete: int, sig: int) -> str:
    """Send ``sig`` to the whole process group once ``complete`` runs are done and one runs."""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        s = statuses(out)
        if s.count("complete") >= complete and "running" in s:
            os.killpg(proc.pid, sig)
            break
        if proc.poll() is not None:
            break
        time.sleep(0.02)
    output, _ = proc.communicate(timeout=120)
    return output


def test_interrupted_and_killed_sweeps_resume_to_exactly_the_full_set(tmp_path, data_cache):
    out = tmp_path / "res"
    expected = {s.run_id for s in plan(RESUME_SWEEP[4:] + [f"results_dir={out}"], True).specs}
    assert len(expected) == 6

    # Ctrl-C after the first run: the run in flight is marked failed, the manifest interrupted.
    proc = start_sweep(out, data_cache)
    output = interrupt_after(proc, out, 1, signal.SIGINT)
    assert proc.returncode == 130, output
    assert manifest(out)["state"] == "interrupted"
    assert "failed" in statuses(out) and "running" not in statuses(out)

    # SIGKILL of the whole tree after three runs: nothing gets to clean up.
    proc = start_sweep(out, data_cache)
    output = interrupt_after(proc, out, 3, signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL, output
    assert "running" in statuses(out)  # the killed run's record says so...
    frame = results.load(out, include_incomplete=False)
    assert set(frame["status"]) == {"complete"}  # ...but it never reads as a result
    stale = results.load(out).query("status == 'failed'")
    assert len(stale) >= 1
    assert manifest(out)["state"] == "running"
    complete_before = statuses(out).count("complete")

    proc = start_sweep(out, data_cache)
    output, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, output
    dirs = run_dirs(out)
    assert sorted(d.name for d in dirs) == sorted(expected)  # each run id once, none extra
    assert statuses(out) == ["complete"] * 6
    m = manifest(out)
    assert m["state"] == "finished" and set(m["run_ids"]) == expected
    assert m["counts"] == {"skipped": complete_before, "complete": 6 - complete_before}
    assert f"{complete_before} skipped" in output
    for d in dirs:  # every file is whole: one row per evaluation, parameters readable
        epochs = pd.read_csv(d / "epochs.csv")
        assert list(epochs["step"]) == sorted(set(epochs["step"])) and len(epochs) == 9
        with np.load(d / "params.npz") as f:
            assert len(f.files) == 6


@pytest.mark.slow
def test_random_kills_then_resume_give_exactly_the_full_set(tmp_path, data_cache):
    """Kill the whole process tree at random moments (DDP workers included), then finish."""
    import random

    out = tmp_path / "res"
    sweep = [
        "-m",
        "dpsuite",
        "run",
        "-m",
        "workers=1,2",
        "mode=ddp,simulated",
        "seed=0,1",
        "threads_per_worker=1",
        "workload.num_samples=3000",
        "train.epochs=3",
        f"results_dir={out}",
    ]
    expected = {s.run_id for s in plan(sweep[4:], True).specs}
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "DPSUITE_CACHE_DIR": str(data_cache)}
    rng = random.Random(7)
    kills = 0
    for _ in range(6):
        proc = subprocess.Popen(
            [sys.executable, *sweep],
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        time.sleep(rng.uniform(1.0, 12.0))
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            kills += 1
        proc.wait()
        frame = results.load(out, include_incomplete=False) if out.exists() else None
        if frame is not None and not frame.empty:
            assert set(frame["status"]) == {"complete"}  # never a half-written result
    assert kills >= 3, "the sweep finished before most kills: make it longer"
    final = subprocess.run(
        [sys.executable, *sweep], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    assert final.returncode == 0, final.stdout + final.stderr
    assert sorted(d.name for d in run_dirs(out)) == sorted(expected)
    assert statuses(out) == ["complete"] * len(expected)
    assert manifest(out)["state"] == "finished"
