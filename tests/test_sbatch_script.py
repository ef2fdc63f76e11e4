"""`dpsuite sbatch` without SLURM: the batch script of a run or sweep, and bad input as one line
(submitting and following it: tests/test_slurm_detached.py)."""

import shlex
import sys

import pytest

ARGS = ["run", "-m", "mode=simulated", "workers=1,2", "train.max_steps=5"]


def test_the_script_runs_the_checked_command_in_one_whole_node_job(dpsuite, tmp_path, capsys):
    out = tmp_path / "res"
    assert (
        dpsuite("sbatch", "--time", "30", "--option=--partition=cpu", *ARGS, f"results_dir={out}")
        == 0
    )
    script = capsys.readouterr().out
    lines = script.splitlines()
    assert lines[0] == "#!/bin/bash"
    sbatch = [line.removeprefix("#SBATCH ") for line in lines if line.startswith("#SBATCH ")]
    assert {"--nodes=1", "--ntasks=1", "--exclusive", "--time=30"} <= set(sbatch)
    assert sbatch[-1] == "--partition=cpu"  # after the defaults: it wins over them
    assert f"--output={out}/slurm-%j.out" in sbatch
    command = [sys.executable, "-m", "dpsuite", *ARGS, f"results_dir={out}"]
    assert lines[-1] == f"exec {shlex.join(command)}"
    assert f"dpsuite sweep --status {out}" in script
    assert not out.exists()  # printed only: nothing written


def test_out_writes_an_executable_script(dpsuite, tmp_path, capsys):
    path = tmp_path / "job.sbatch"
    assert (
        dpsuite("sbatch", "--out", str(path), "sweep", "demo", f"results_dir={tmp_path / 'r'}") == 0
    )
    assert path.stat().st_mode & 0o111 and "sweep demo" in path.read_text().splitlines()[-1]
    assert f"wrote {path}" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "sbatch: give the command to run"),
        (["report", "x"], "sbatch: give the command to run"),
        (["run", "--dry-run"], "sbatch: --dry-run cannot be run in a batch job"),
        (["sweep", "nosuch"], "unknown sweep 'nosuch'"),
        (["run", "workload=nosuch"], "unknown workload 'nosuch'"),
    ],
)
def test_bad_input_is_one_line(dpsuite, capsys, args, message):
    assert dpsuite("sbatch", *args) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and message in err


def test_status_of_a_directory_that_is_not_there_is_one_line(dpsuite, tmp_path, capsys):
    assert dpsuite("sweep", "--status", str(tmp_path / "none")) == 2
    assert capsys.readouterr().err.strip().endswith("none: no such directory")
