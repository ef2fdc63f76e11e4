"""Shared fixtures: a private data cache, small datasets, and a CLI runner."""

from __future__ import annotations

import json
import os
import signal
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

# A command started in the background by a non-interactive shell (`cmd &` in a script) inherits
# SIGINT ignored, and so would every process the tests start: the tests that press Ctrl-C
# (SIGINT to a command's process group) would then test nothing but a wait. Handling it here
# gives the children the default disposition, as under a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

REPO = Path(__file__).resolve().parents[1]


def pytest_collection_modifyitems(config, items):
    """The two-node cluster tests run only when asked for (`-m multinode`, `nox -s cluster`):
    bringing up two nodes and killing one is no part of a default run."""
    multinode_asked = "multinode" in (config.option.markexpr or "")
    skip = pytest.mark.skip(reason="two-node cluster test: run with -m multinode (nox -s cluster)")
    for item in items:
        if "multinode" in item.keywords and not multinode_asked:
            item.add_marker(skip)
        # Under pytest-xdist with `--dist loadgroup`, the tests on the one test SLURM run in one
        # worker, one after another: each expects a queue of its own. (`nox -s tests` runs them
        # apart, after the others, without xdist.)
        if "slurm" in item.keywords:
            item.add_marker(pytest.mark.xdist_group("slurm"))


SMALL = ["workload.num_samples=2000"]


@pytest.fixture(autouse=True)
def fresh_meta_measurements():
    """Each test starts without the meta-device measurements an earlier test left in this
    process (a test may patch one workload instance of a class another test measured)."""
    from dpsuite.measure import meta_model

    meta_model.forget_measurements()


@pytest.fixture(scope="session", autouse=True)
def data_cache(tmp_path_factory) -> Path:
    """Keep generated datasets out of the user's cache; shared by the whole test session, and
    by every pytest-xdist worker of it (cache files are written whole, then renamed)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the session's directory, above each worker's own
    cache = root / "data-cache"
    cache.mkdir(exist_ok=True)
    os.environ["DPSUITE_CACHE_DIR"] = str(cache)
    return cache


@pytest.fixture
def dpsuite(tmp_path):
    """Run `dpsuite ...` in this process (same code path as the console script)."""
    from dpsuite.cli.main import main

    def run(*args: str) -> int:
        return main([*args])

    return run


def run_subprocess(
    *args: str, timeout: float = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run `python -m dpsuite ...` as a user would, in a fresh interpreter (``env``: variables
    set on top of this process's)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "dpsuite", *args],
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


def trained_params(dpsuite, out: Path, *overrides: str) -> dict[str, np.ndarray]:
    """`dpsuite run ...` into ``out`` (one complete run, train.save_params=true among the
    overrides): its final parameters."""
    assert dpsuite("run", *overrides, f"results_dir={out}") == 0
    run = only_run(out)
    assert read_run(run)["status"] == "complete"
    return read_params(run)


def max_diff(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    """The largest absolute difference between two runs' parameters (the same names)."""
    assert a.keys() == b.keys()
    return max(float(np.max(np.abs(a[k] - b[k]))) for k in a)


SLURM_SCRIPT = REPO / "tests" / "cluster" / "slurm.sh"


@pytest.fixture(scope="session")
def slurm_cluster():
    """A real single-host SLURM (tests/cluster/slurm.sh): the one already up (`nox -s cluster`),
    or one started here and stopped at the end. Tests that need it are skipped, with the
    reason, where it cannot start (not root, no Debian packages)."""
    env_line = subprocess.run(
        ["bash", str(SLURM_SCRIPT), "env"], capture_output=True, text=True, check=True
    ).stdout
    conf = env_line.strip().split("=", 1)[1]
    previous = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = conf
    running = subprocess.run(["bash", str(SLURM_SCRIPT), "status"], capture_output=True)
    started = False
    if running.returncode != 0:
        if os.geteuid() != 0:
            pytest.skip("starting the test SLURM cluster needs root (tests/cluster/slurm.sh)")
        done = subprocess.run(
            ["bash", str(SLURM_SCRIPT), "start"], capture_output=True, text=True, timeout=900
        )
        if done.returncode != 0:
            lines = (done.stderr or done.stdout).strip().splitlines() or ["no output"]
            pytest.skip(f"the test SLURM cluster did not start: {lines[-1]}")
        started = True
    yield conf
    if started:
        subprocess.run(["bash", str(SLURM_SCRIPT), "stop"], capture_output=True, timeout=300)
    if previous is None:
        os.environ.pop("SLURM_CONF", None)
    else:
        os.environ["SLURM_CONF"] = previous


# ---- the results trees several report tests read (tests/report_trees.py) ------------------------
# Each is written once a session; a test that changes a tree writes its own.


@pytest.fixture(scope="session")
def scaling_tree(tmp_path_factory) -> Path:
    """A scaling sweep of one machine, 1 to 8 workers, with its comm-bench."""
    from tests import report_trees as trees

    root = tmp_path_factory.mktemp("scaling")
    trees.write_scaling(root)
    trees.write_comm_bench(root)
    return root


@pytest.fixture(scope="session")
def convergence_tree(tmp_path_factory) -> Path:
    """A fixed-budget convergence study: three LR rules at four global batches, two seeds."""
    from tests import report_trees as trees

    root = tmp_path_factory.mktemp("convergence")
    trees.write_convergence(root)
    return root


@pytest.fixture(scope="session")
def mixed_tree(tmp_path_factory) -> tuple[Path, dict[str, Path]]:
    """Scaling, convergence and a comm-bench together, with failed runs and damaged files (by
    what is damaged)."""
    from tests import report_trees as trees

    root = tmp_path_factory.mktemp("mixed")
    trees.write_scaling(root)
    trees.write_convergence(root)
    trees.write_comm_bench(root)
    return root, trees.write_failures(root)


@pytest.fixture(scope="session")
def repeated_machines(tmp_path_factory) -> tuple[Path, Path]:
    """Two machines' scaling runs with repeats (`report_trees.REPEATED_A`, `REPEATED_B`)."""
    from tests import report_trees as trees

    root = tmp_path_factory.mktemp("repeated")
    trees.write_repeated(root / "a", "box-a", trees.REPEATED_A)
    trees.write_repeated(root / "b", "box-b", trees.REPEATED_B)
    return root / "a", root / "b"
