"""The `dpsuite` command line itself: its generated help, shell completion (through a real bash)
and what `run --help` loads."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from dpsuite.cli import completion
from dpsuite.cli.main import COMMANDS
from tests.conftest import REPO


def test_help_lists_every_command(dpsuite, capsys):
    assert dpsuite("--help") == 0
    out = capsys.readouterr().out
    listed = [line.split()[0] for line in out.splitlines() if line.startswith("    ")]
    assert set(COMMANDS) <= set(listed), out
    assert "export" in listed


def test_no_command_prints_help_and_fails(dpsuite, capsys):
    assert dpsuite() == 2
    assert "commands:" in capsys.readouterr().out


def test_unknown_option_is_one_line(dpsuite, capsys):
    assert dpsuite("--frobnicate") == 2
    err = capsys.readouterr().err.strip()
    assert err == "dpsuite: error: unrecognized arguments: --frobnicate (see dpsuite --help)"


@pytest.mark.parametrize(
    "line,expected",
    [
        ("dpsuite ", set(COMMANDS)),
        ("dpsuite ex", {"export"}),
        (
            "dpsuite sweep sc",
            {"scaling", "scaling_models", "scaling_models_gpt2", "scaling_models_resnet50"},
        ),
        ("dpsuite sweep scaling work", {"workers=", "workload=", "workload."}),
        (
            "dpsuite run workload=t",
            {"workload=tiny_gpt", "workload=tiny_gpt_loss", "workload=torchvision"},
        ),
        ("dpsuite run sync=p", {"sync=param_server", "sync=powersgd"}),
        ("dpsuite run lr_rule=linear_warmup lr_rule.war", {"lr_rule.warmup_epochs="}),
        ("dpsuite run --dr", {"--dry-run"}),
        ("dpsuite export ", {"parquet", "tensorboard", "wandb", "mlflow"}),
        ("dpsuite compare --fa", {"--fail-below"}),
        ("python -m dpsuite rep", {"report"}),
    ],
)
def test_completion_candidates(line, expected):
    assert set(completion.candidates(line, COMMANDS)) == expected


def test_presets_offered_are_the_runnable_ones():
    offered = completion.candidates("dpsuite sweep ", COMMANDS)
    assert "convergence" in offered
    assert not [name for name in offered if name.startswith("_")]  # shared parts, not presets


def test_unknown_completion_action_is_one_line(dpsuite, capsys):
    assert dpsuite("-sc", "install=fish") == 2
    assert capsys.readouterr().err.startswith("dpsuite: error: -sc install=fish: choose one of")


@pytest.fixture
def dpsuite_on_path(tmp_path) -> dict[str, str]:
    """An environment whose `dpsuite` is this tree's, as an installed console script is."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "dpsuite"
    script.write_text(f'#!/bin/sh\nexec {sys.executable} -m dpsuite "$@"\n')
    script.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": str(REPO)}


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("both", [False, True])
def test_bash_completes_through_the_installed_script(dpsuite_on_path, both):
    """Hydra's bash script, as `dpsuite -sc install=bash` prints it (or `dpsuite run -sc ...`,
    Hydra's spelling), calls `dpsuite -sc query=bash`; bash's COMPREPLY is what a TAB shows."""
    install = "dpsuite run --shell-completion install=bash" if both else "dpsuite -sc install=bash"
    program = f"""
eval "$({install})"
complete -p dpsuite
COMP_LINE='dpsuite run workload=mnist1d_m'; COMP_POINT=${{#COMP_LINE}}; COMP_CWORD=2
hydra_bash_completion
echo "reply: ${{COMPREPLY[*]}}"
"""
    done = subprocess.run(
        ["bash", "-c", program],
        env=dpsuite_on_path,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    assert "hydra_bash_completion dpsuite" in done.stdout
    assert "reply: workload=mnist1d_mlp" in done.stdout, done.stdout + done.stderr


# What help and completion must not load: torch (and the workloads' models built on it), the
# libraries of reports, and the code that runs, records or reports runs. Their imports took
# `dpsuite run --help` from a fraction of a second to several.
HEAVY = [
    "torch",
    "pandas",
    "matplotlib",
    "scipy",
    "mnist1d",
    "dpsuite.workloads.base",
    "dpsuite.workloads.mnist_1d",
    "dpsuite.engine.launch",
    "dpsuite.runtime.distributed",
    "dpsuite.sync.registry",
    "dpsuite.sweep.runner",
    "dpsuite.results.load",
]


@pytest.mark.parametrize(
    "args,comp_line,shown",
    [
        (["--help"], None, "commands:"),
        (["run", "--help"], None, "workload.num_samples"),
        (["run", "--help", "workload=gpt2", "sync=powersgd"], None, "workload.size=124M"),
        (["sweep", "--help"], None, "presets:"),
        (["-sc", "query=bash"], "dpsuite run workload=", "workload=mnist1d_mlp"),
        (["-sc", "query=bash"], "dpsuite run workload=gpt2 workload.s", "workload.size="),
        (["-sc", "query=bash"], "dpsuite sweep sc", "scaling"),
        (["-sc", "install=bash"], None, "hydra_bash_completion"),
    ],
)
def test_help_and_completion_load_no_torch_or_run_code(args, comp_line, shown):
    """Help and completion read the config only (torch-free config dataclasses), in a fresh
    process: what a run, its workloads and the reports need stays unloaded."""
    check = (
        "import contextlib, io, sys\n"
        "from dpsuite.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        f"    assert main({args!r}) == 0\n"
        f"assert {shown!r} in out.getvalue(), out.getvalue()\n"
        f"print([m for m in {HEAVY!r} if m in sys.modules])\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if comp_line is not None:
        env.update(COMP_LINE=comp_line, COMP_POINT=str(len(comp_line)))
    done = subprocess.run(
        [sys.executable, "-c", check],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("args", [["schema"], ["run", "--help"], ["--help"]], ids=" ".join)
def test_a_closed_stdout_pipe_ends_the_command_quietly(args):
    """`dpsuite schema | head -c 10`: the reader is gone before the command writes."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "dpsuite", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    proc.stdout.close()  # before the interpreter has even started: every write breaks the pipe
    err = proc.stderr.read()
    proc.wait(timeout=120)
    assert proc.returncode in (0, 141), err
    assert "Traceback" not in err and "BrokenPipe" not in err, err
