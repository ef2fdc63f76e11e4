"""Shared fixtures: a private data cache, small datasets, and a CLI runner."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import settings

# Property tests are deterministic in the default run (CI): the same examples every time, no
# example database carried between runs. `nox -s explore` runs them with fresh random examples
# and many more of them; whatever it finds becomes a plain regression test.
settings.register_profile("ci", max_examples=50, derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", max_examples=2000, derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("DPSUITE_HYPOTHESIS_PROFILE", "ci"))

REPO = Path(__file__).resolve().parents[1]
SMALL = ["workload.num_samples=2000"]


@pytest.fixture(scope="session", autouse=True)
def data_cache(tmp_path_factory) -> Path:
    """Keep generated datasets out of the user's cache; shared by the whole test session."""
    cache = tmp_path_factory.mktemp("cache")
    os.environ["DPSUITE_CACHE_DIR"] = str(cache)
    return cache


@pytest.fixture
def dpsuite(tmp_path):
    """Run `dpsuite ...` in this process (same code path as the console script)."""
    from suite.cli.main import main

    def run(*args: str) -> int:
        return main([*args])

    return run


def run_subprocess(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run `python -m suite ...` as a user would, in a fresh interpreter."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [sys.executable, "-m", "suite", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env=env,
    )


def only_run(results_dir: Path) -> Path:
    runs = [p.parent for p in results_dir.rglob("run.json")]
    assert len(runs) == 1, runs
    return runs[0]


def read_run(run_dir: Path) -> dict:
    return json.loads((run_dir / "run.json").read_text())


def read_params(run_dir: Path) -> dict[str, np.ndarray]:
    with np.load(run_dir / "params.npz", allow_pickle=False) as f:
        return {k: f[k] for k in f.files}
