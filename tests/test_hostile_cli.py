"""Hostile command lines: Hydra's own flags, upper bounds, contradictions, list elements,
non-finite numbers, tag characters, empty and huge sweeps, comm-bench beside a sweep and the
default install's plugin scan. Every one is one `dpsuite: error:` line and exit 2, before any
work."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dpsuite.measure import comm_bench
from tests.conftest import REPO, SMALL, run_subprocess
from tests.test_results_lock import HOLDER


def one_error(capsys, code: int, *needles: str) -> str:
    """The command exited 2 with exactly one `dpsuite: error:` line holding ``needles``."""
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert err.count("\n") == 0 and err.startswith("dpsuite: error: "), err
    for needle in needles:
        assert needle in err, err
    return err


@pytest.mark.parametrize(
    "args, needle",
    [
        (["-cd", "{tmp}", "workers=0"], "Hydra's option -cd is not supported"),
        (["-cd", "{tmp}", "workers=abc"], "Hydra's option -cd is not supported"),
        (["--config-dir={tmp}", "workers=1"], "Hydra's option --config-dir is not supported"),
        (["-cp", "{tmp}"], "Hydra's option -cp is not supported"),
        (["--info"], "Hydra's option --info is not supported"),
        (["--cfg", "job", "workers=0"], "workers must be an integer >= 1, got 0"),
        (["--cfg", "job", "workers=abc"], "workers must be an integer, got abc"),
        (["-m", "workers=1,0", "--cfg", "job"], "workers must be an integer >= 1, got 0"),
        (["--cfg", "everything"], "--cfg takes one of job, hydra, all"),
    ],
)
def test_hydra_flags_take_no_side_door(dpsuite, capsys, tmp_path, args, needle):
    results_dir = tmp_path / "results"
    code = dpsuite("run", *[a.format(tmp=tmp_path) for a in args], f"results_dir={results_dir}")
    one_error(capsys, code, needle)
    assert not results_dir.exists(), "nothing was created"


def test_cfg_job_checks_first_and_shows_a_preset_and_a_multirun(dpsuite, capsys, tmp_path):
    results_dir = tmp_path / "results"
    assert dpsuite("run", "--cfg", "job", "+sweep=scaling", f"results_dir={results_dir}") == 0
    shown = capsys.readouterr()
    assert "workload:" in shown.out and "hydra:" not in shown.out and not shown.err
    assert dpsuite("run", "-m", "workers=1,2", "--cfg", "job", f"results_dir={results_dir}") == 0
    assert "workers: 1" in capsys.readouterr().out
    assert dpsuite("sweep", "demo", "--cfg", "job", f"results_dir={results_dir}") == 0
    shown = capsys.readouterr().out
    assert "# part demo_scaling" in shown and "# part demo_convergence" in shown
    code = dpsuite("sweep", "scaling", "--cfg", "job", "workers=0", f"results_dir={results_dir}")
    one_error(capsys, code, "workers must be an integer >= 1, got 0")
    assert not results_dir.exists()


def test_a_run_into_a_directory_a_sweep_holds_is_refused(dpsuite, capsys, tmp_path):
    """The documented path and every Hydra flag that still runs go through the lock."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path)], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        code = dpsuite("run", *SMALL, "train.max_steps=2", f"results_dir={tmp_path}")
        one_error(capsys, code, "is in use by another dpsuite command")
        code = dpsuite("run", "-cd", str(tmp_path), f"results_dir={tmp_path}")
        one_error(capsys, code, "not supported")
        code = dpsuite(
            "comm-bench", "--workers", "1", "--sizes", "1K", "--results-dir", str(tmp_path)
        )
        one_error(capsys, code, "is in use by another dpsuite command")
    finally:
        holder.kill()
        holder.wait()
    assert not (tmp_path / "comm_bench").exists()


@pytest.mark.parametrize(
    "args, needle",
    [
        (["seed=99999999999999999999"], "seed must be in [0, 4294967295]"),
        (["batch.per_worker=32", "batch.global=48", "workers=2"], "contradict each other"),
        (["schedule.milestones=[2,-1]"], "schedule.milestones must be in (0, 1), got 2.0"),
        (["schedule.milestones=[0.5,-1]"], "schedule.milestones must be in (0, 1), got -1.0"),
        (["hardware.tag='a|b'"], "hardware.tag must be a machine name"),
        (["hardware.tag='a\nb'"], "hardware.tag must be a machine name"),
        (["workers=100000"], "processes do not fit in memory"),
    ],
)
def test_up_front_checks_are_complete(dpsuite, capsys, tmp_path, args, needle):
    code = dpsuite("run", *args, f"results_dir={tmp_path / 'r'}")
    one_error(capsys, code, needle)
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())


@pytest.mark.parametrize(
    "axis, needle",
    [
        ("seed=range(0,100000000)", "the sweep has 100000000 runs; at most 4096"),
        ("workers=range(1,1)", "the sweep has no runs"),
    ],
)
def test_sweeps_are_counted_before_they_are_expanded(dpsuite, capsys, tmp_path, axis, needle):
    started = time.monotonic()
    code = dpsuite("run", "-m", axis, f"results_dir={tmp_path / 'r'}")
    one_error(capsys, code, needle)
    assert time.monotonic() - started < 60, "counted, not listed"


@pytest.mark.parametrize("ratio", ["inf", "nan", "-inf"])
def test_fail_below_must_be_finite(dpsuite, capsys, tmp_path, ratio):
    code = dpsuite("compare", str(tmp_path), str(tmp_path), f"--fail-below={ratio}")
    one_error(capsys, code, "--fail-below: must be a finite number")


def profile(tmp_path: Path, **changes: str) -> Path:
    text = (REPO / "suite/analysis/scaling/profiles/dgx-h100.yaml").read_text()
    for key, value in changes.items():
        lines = text.splitlines()
        at = next(i for i, line in enumerate(lines) if line.strip().startswith(f"{key}:"))
        indent = lines[at][: len(lines[at]) - len(lines[at].lstrip())]
        lines[at] = f"{indent}{key}: {value}"
        text = "\n".join(lines) + "\n"
    path = tmp_path / "profile.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "changes, needle",
    [
        ({"bandwidth_GB_s": ".nan"}, "bandwidth_GB_s must be a finite number, got nan"),
        ({"latency_us": ".nan"}, "latency_us must be a finite number, got nan"),
        ({"latency_us": ".inf"}, "latency_us must be a finite number, got inf"),
        ({"gpus_per_node": "2.7"}, "gpus_per_node must be an integer >= 1, got 2.7"),
    ],
)
def test_profiles_take_finite_numbers_and_whole_gpus(dpsuite, capsys, tmp_path, changes, needle):
    path = profile(tmp_path, **changes)
    code = dpsuite(
        "predict", "--profile", str(path), "--params", "1e8", "--flops-per-sample", "1e9"
    )
    one_error(capsys, code, needle)


def test_comm_bench_tag_is_a_machine_name(dpsuite, capsys, tmp_path):
    code = dpsuite("comm-bench", "--tag", "a|b\nc", "--results-dir", str(tmp_path))
    one_error(capsys, code, "--tag must be a machine name")


def test_two_comm_bench_results_of_one_second_never_share_a_name(tmp_path):
    spec = comm_bench.resolve(1, "1K", 2, "fp32", 0, 1, "gloo", str(tmp_path), "box")
    first, second = (comm_bench.bench_dir_for(spec, "host") for _ in range(2))
    assert first != second and first.is_dir() and second.is_dir()


def test_comm_bench_counts_the_measured_footprint_of_each_rank(dpsuite, capsys, tmp_path):
    code = dpsuite(
        "comm-bench", "--workers", "300", "--sizes", "1K", "--results-dir", str(tmp_path)
    )
    one_error(capsys, code, "do not fit in memory", "for its process", "x 300 ranks")


def test_comm_bench_writes_under_the_lock_and_leaves_one_result(dpsuite, capsys, tmp_path):
    args = ["--workers", "1", "--sizes", "1K", "--iters", "1", "--warmup", "0"]
    assert dpsuite("comm-bench", *args, "--results-dir", str(tmp_path)) == 0
    assert dpsuite("comm-bench", *args, "--results-dir", str(tmp_path)) == 0
    assert len(list((tmp_path / "comm_bench").glob("*/comm_bench.json"))) == 2


# ---- the default install (no `slurm` extra) ---------------------------------------------------
BARE_VENV = Path(os.environ.get("DPSUITE_BARE_VENV", "/work/venv-22"))


def bare_python() -> str:
    python = BARE_VENV / "bin" / "python"
    if not python.exists():
        pytest.skip(f"no virtualenv without the slurm extra at {BARE_VENV} (DPSUITE_BARE_VENV)")
    has = subprocess.run([python, "-c", "import hydra_plugins.hydra_submitit_launcher"])
    if has.returncode == 0:
        pytest.skip(f"{BARE_VENV} has hydra-submitit-launcher installed")
    return str(python)


@pytest.mark.parametrize(
    "args, needle",
    [
        (["run", "workers=0"], "workers must be an integer >= 1, got 0"),
        (["run", "-m", "hydra/launcher=slurm", "workers=1"], "pip install 'dpsuite[slurm]'"),
    ],
)
def test_the_default_install_prints_no_plugin_warning(tmp_path, args, needle):
    done = subprocess.run(
        [bare_python(), "-m", "dpsuite", *args, f"results_dir={tmp_path}"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=300,
    )
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0, done.stderr
    assert done.stderr.startswith("dpsuite: error: ") and needle in done.stderr


def test_the_slurm_launcher_is_still_there_with_the_extra():
    from hydra_plugins.dpsuite_slurm_launcher import SlurmLauncher  # noqa: F401  (importable with the extra)

    done = run_subprocess(
        "run", "-m", "hydra/launcher=slurm", "--cfg", "hydra", "-p", "hydra.launcher"
    )
    assert done.returncode == 0, done.stderr
    assert "_target_: hydra_plugins.dpsuite_slurm_launcher.SlurmLauncher" in done.stdout
