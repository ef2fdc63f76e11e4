"""One import name: the wheel holds only `dpsuite` (suite/ and workloads/ mapped into it) and its
Hydra launcher, and a team's own `suite` or `workloads` package never meets dpsuite's."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO, only_run, read_run

# Where each source folder lands in the installed package.
INSTALLED_AS = {
    "suite": "dpsuite",
    "workloads": "dpsuite/workloads",
    "hydra_plugins": "hydra_plugins",
}


def source_files() -> set[str]:
    """The package's .py and config files as they are named once installed."""
    found = set()
    for folder, installed in INSTALLED_AS.items():
        for path in (REPO / folder).rglob("*"):
            if path.suffix in {".py", ".yaml"} and "__pycache__" not in path.parts:
                found.add(f"{installed}/{path.relative_to(REPO / folder).as_posix()}")
    return found


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> set[str]:
    """The names inside a wheel built from a copy of the sources (the build writes beside them)."""
    if importlib.util.find_spec("setuptools") is None:
        pytest.skip("building a wheel without an index needs setuptools installed")
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__")
    for folder in INSTALLED_AS:
        shutil.copytree(REPO / folder, src / folder, ignore=ignore)
    pip = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    subprocess.run([*pip, "-w", str(tmp / "out"), str(src)], check=True, timeout=300)
    (built,) = (tmp / "out").glob("dpsuite-*.whl")
    with zipfile.ZipFile(built) as whl:
        return set(whl.namelist())


def test_the_wheel_installs_only_dpsuite_and_its_hydra_launcher(wheel):
    tops = {name.split("/")[0] for name in wheel if not name.split("/")[0].endswith(".dist-info")}
    assert tops == {"dpsuite", "hydra_plugins"}
    plugins = {name.split("/")[1] for name in wheel if name.startswith("hydra_plugins/")}
    assert plugins == {"dpsuite_slurm_launcher"}


def test_every_source_file_is_in_the_wheel(wheel):
    """A new subpackage missing from pyproject's package list would not install."""
    assert source_files() - wheel == set()


def team_repo(root: Path) -> Path:
    """A team's repository whose own `suite` and `workloads` packages refuse to be imported."""
    for name in ("suite", "workloads"):
        (root / name).mkdir(parents=True)
        (root / name / "__init__.py").write_text(f'raise ImportError("the team\'s own {name}")\n')
    return root


def run_in(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """`python -m dpsuite ...` from ``cwd``, with ``cwd`` first on PYTHONPATH."""
    env = {**os.environ, "PYTHONPATH": str(cwd), "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "dpsuite", *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_a_team_repo_with_its_own_suite_and_workloads_runs_dpsuite(tmp_path):
    team = team_repo(tmp_path / "team")
    results = tmp_path / "results"
    done = run_in(
        team,
        "run",
        "workload=mnist1d_mlp",
        "workload.num_samples=2000",  # the tests' shared small dataset, not 50,000 generated
        "train.max_steps=2",
        f"results_dir={results}",
    )
    assert done.returncode == 0, done.stderr
    assert read_run(only_run(results))["status"] == "complete"
    assert run_in(team, "run", "--help").returncode == 0


def test_a_plugin_written_for_the_old_names_is_told_the_new_one(tmp_path):
    (tmp_path / "oldplug.py").write_text("from workloads import Data, Workload\n")
    done = run_in(tmp_path, "run", "workload=oldplug:Model", f"results_dir={tmp_path / 'r'}")
    lines = done.stderr.strip().splitlines()
    assert done.returncode != 0 and len(lines) == 1, done.stderr
    assert "'workloads', which dpsuite now names 'dpsuite.workloads'" in lines[0]
