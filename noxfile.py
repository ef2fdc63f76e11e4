"""Developer and user sessions: `nox -s tests`, `nox -s demo`, `nox -s lint`, `nox -s bench`,
`nox -s overhead`, `nox -s readers_bench`, `nox -s cluster` (a real SLURM), and report helpers.

Each session installs what it needs into its own virtualenv. On a machine without CUDA, torch
comes from PyTorch's CPU index (a ~200 MB wheel) rather than PyPI's default multi-GB CUDA build;
where that index cannot be reached, from the indexes pip is configured with.
Set DPSUITE_TORCH to choose another torch requirement (e.g. "torch==2.5.1").
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator

import nox

nox.options.sessions = ["lint", "tests"]
nox.options.reuse_existing_virtualenvs = True

TORCH = os.environ.get("DPSUITE_TORCH", "torch==2.13.0")
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
SLURM_SCRIPT = "tests/cluster/slurm.sh"
DEFAULT_TESTS = "not slow and not browser and not multinode and not cluster"

# torchvision is built against one torch release: the pair must match (PyPI's latest
# torchvision fails to import beside an older torch). DPSUITE_VISION_PAIR chooses another pair.
VISION_PAIR = os.environ.get("DPSUITE_VISION_PAIR", "torch==2.14.1 torchvision==0.29.1").split()


def has_cuda() -> bool:
    return shutil.which("nvidia-smi") is not None


def reachable(url: str, timeout_s: float = 5.0) -> bool:
    """Whether the index answers at all."""
    try:
        urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout_s)
    except (OSError, ValueError):
        return False
    return True


def install_torch(session: nox.Session) -> None:
    if has_cuda():
        session.install(TORCH)
    elif reachable(CPU_INDEX):
        session.install(TORCH, "--extra-index-url", CPU_INDEX)
    else:
        # pip would retry every package against an index it cannot reach (about a minute and
        # a half per install here): torch comes from the indexes pip is configured with.
        session.warn(f"{CPU_INDEX} cannot be reached: torch from pip's configured indexes")
        session.install(TORCH)


def install_suite(session: nox.Session, extras: str = "") -> None:
    install_torch(session)
    session.install("-e", f".{extras}")


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite (unit, multi-process DDP, end to end, SLURM's main cases); slow stress
    tests and second-order cluster cases excluded. Each part ends with its slowest tests."""
    install_suite(session, "[dev,slurm,parquet,tensorboard,wandb,mlflow]")
    # Two pytest-xdist workers: most tests wait (on worker processes, a deadline) about as long
    # as they compute. The tests on the test SLURM come after, in this process alone: beside
    # other tests its jobs' timings stretch (a cancelled job's run then races its own record),
    # and an xdist worker's end does not wait for the test cluster to stop.
    parallel = ["-n", "2", "--dist", "loadgroup"]
    here = f"({DEFAULT_TESTS}) and not slurm"
    session.run("pytest", "-m", here, *parallel, "--durations=25", *session.posargs)
    slurm = ["-m", f"({DEFAULT_TESTS}) and slurm", "--durations=10"]
    # exit code 5: none selected (e.g. `nox -s tests -- -k name` picking only tests above)
    session.run("pytest", *slurm, *session.posargs, success_codes=[0, 5])


@contextlib.contextmanager
def test_cluster(session: nox.Session) -> Iterator[str]:
    """The test SLURM (tests/cluster/slurm.sh) up inside the block; yields its SLURM_CONF.

    A cluster that was already up is used and left up; one started here is stopped after.
    """
    already_up = subprocess.run(["bash", SLURM_SCRIPT, "status"], capture_output=True)
    session.run("bash", SLURM_SCRIPT, "start", external=True)
    env = subprocess.run(["bash", SLURM_SCRIPT, "env"], capture_output=True, text=True).stdout
    try:
        yield env.strip().split("=", 1)[1]
    finally:
        if already_up.returncode != 0:
            session.run("bash", SLURM_SCRIPT, "stop", external=True)


@nox.session
def wheel(session: nox.Session) -> None:
    """What a user installs: `python -m build` makes the sdist and, from it, the wheel; the
    wheel goes into this session's fresh virtualenv (its dependencies from the indexes, torch
    as in every session), then `dpsuite --help` and a tiny run, from outside the checkout so
    that only the installed package can answer."""
    session.install("build")
    dist = session.create_tmp()
    shutil.rmtree(os.path.join(dist, "dist"), ignore_errors=True)
    out = os.path.join(dist, "dist")
    session.run("python", "-m", "build", "--outdir", out)
    wheels = [f for f in os.listdir(out) if f.endswith(".whl")]
    sdists = [f for f in os.listdir(out) if f.endswith(".tar.gz")]
    if len(wheels) != 1 or len(sdists) != 1:
        session.error(f"expected one wheel and one sdist in {out}, found {os.listdir(out)}")
    install_torch(session)
    session.install(os.path.join(out, wheels[0]))
    elsewhere = tempfile.mkdtemp(prefix="dpsuite-wheel-")
    with session.chdir(elsewhere):
        where = session.run("python", "-c", "import dpsuite; print(dpsuite.__file__)", silent=True)
        if "site-packages" not in str(where):
            session.error(f"dpsuite was imported from {where}, not from the installed wheel")
        session.run("dpsuite", "--help", silent=True)
        session.run("dpsuite", "--version")
        session.run(
            "dpsuite",
            "run",
            "mode=simulated",
            "workers=2",
            "workload.num_samples=2000",
            "train.max_steps=5",
            f"results_dir={os.path.join(elsewhere, 'results')}",
        )
    shutil.rmtree(elsewhere)


@nox.session
def cluster(session: nox.Session) -> None:
    """The tests marked `slurm` on a real single-host SLURM, and those marked `multinode` on a
    two-node SLURM with its own network (tests/cluster/slurm2.sh) or on two nodes pinned to a
    core each (tests/cluster/pinned_nodes.py), started and torn down by the tests themselves.

    Needs root on a Debian-like machine: tests/cluster/slurm.sh installs slurm-wlm, munge,
    slurmdbd and mariadb-server when missing. `nox -s cluster -- -k kill` picks tests.
    """
    install_suite(session, "[dev,slurm]")
    with test_cluster(session):
        session.run("pytest", "-m", "slurm or multinode", "-rs", *session.posargs)


@nox.session
def two_node_prediction(session: nox.Session) -> None:
    """Predicted vs measured 2-node step on two test nodes pinned to a core each (root):
    tests/cluster/two_node_prediction.py, `-- OUT --repeats N` passed on."""
    install_suite(session, "[dev]")
    session.run("python", "-m", "tests.cluster.two_node_prediction", *session.posargs)


@nox.session
def cluster_bench(session: nox.Session) -> None:
    """On the test SLURM: a 2-run sweep there vs here, and how fast a dead job is noticed."""
    install_suite(session, "[slurm]")
    with test_cluster(session) as slurm_conf:
        session.run("python", "tests/cluster/measure.py", env={"SLURM_CONF": slurm_conf})


@nox.session
def explore(session: nox.Session) -> None:
    """Property tests with fresh random examples, many more than CI's fixed ones.

    CI runs them derandomized (tests/conftest.py); a failure found here becomes a plain
    regression test. `nox -s explore -- --hypothesis-seed=N` replays one exploration.
    """
    install_suite(session, "[dev]")
    session.env["DPSUITE_HYPOTHESIS_PROFILE"] = "explore"
    session.run(
        "pytest", "tests/test_properties.py", "tests/test_sharding.py", "-q", *session.posargs
    )


@nox.session
def stress(session: nox.Session) -> None:
    """Long reliability tests: back-to-back DDP runs, large sweeps (marked slow)."""
    install_suite(session, "[dev,slurm]")
    session.run("pytest", "-m", "slow", "-s", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff lint and format check; the layers of Code layout (docs/development.md)."""
    session.install("ruff==0.17.6", "import-linter==2.17")  # pinned: formatting differs
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    # Contracts in pyproject.toml. import-linter reads a package from one folder, so the tree is
    # laid out as it installs (suite/ as dpsuite/, workloads/ inside it) in a scratch folder.
    with tempfile.TemporaryDirectory() as staged:
        shutil.copytree("suite", f"{staged}/dpsuite", ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copytree("workloads", f"{staged}/dpsuite/workloads")
        session.run("lint-imports", env={"PYTHONPATH": staged})


@nox.session
def demo(session: nox.Session) -> None:
    """The main job on a fresh machine: the `demo` sweeps (scaling, convergence), then a report.

    `dpsuite demo` ends with where its time went; the virtualenv and installs come first here."""
    started = time.perf_counter()
    install_suite(session)
    setup = time.perf_counter() - started
    session.run("dpsuite", "demo", *session.posargs)
    session.log(f"installs into the virtualenv (before dpsuite demo): {setup:.1f} s")


@nox.session
def report_browser(session: nox.Session) -> None:
    """Open generated reports in headless Chromium (skipped when `chromium` is not installed).

    Screenshots are kept in reports/browser-check/.
    """
    install_suite(session, "[dev]")
    session.env["DPSUITE_BROWSER_OUT"] = "reports/browser-check"
    session.run("pytest", "-m", "browser", "-rs", "tests/test_report_browser.py", *session.posargs)


@nox.session
def reference_report(session: nox.Session) -> None:
    """Regenerate reports/reference/ from the committed results/reference/."""
    install_suite(session)
    session.run("dpsuite", "report", "results/reference", "--out", "reports/reference")


@nox.session
def reference_archive(session: nox.Session) -> None:
    """Repack the reference results dpsuite installs (`dpsuite compare --reference`) from the
    committed results/reference/ (run.json and benchmark files: about 100 kB)."""
    install_suite(session)  # editable: the archive is written into suite/results/
    session.run(
        "python", "-c", "from dpsuite.results.reference import pack; pack('results/reference')"
    )


@nox.session
def bench(session: nox.Session) -> None:
    """pytest-benchmark benchmarks (tests/bench): all-reduce, training steps, sweep overhead."""
    install_suite(session, "[dev]")
    out = session.posargs[0] if session.posargs else ".benchmarks/bench.json"
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    # addopts skips benchmarks in the default test run; here they are all that runs.
    session.run(
        "pytest",
        "-o",
        "addopts=-ra",
        "tests/bench",
        "--benchmark-only",
        f"--benchmark-json={out}",
    )


@nox.session
def readers_bench(session: nox.Session) -> None:
    """Wall time of `dpsuite report`, `compare` and `export parquet` over a generated results
    tree of 10,000 valid runs (copies of the reference runs, tests/bench/readers_tree.py).

    `nox -s readers_bench -- --runs 1000` for another size; `--keep DIR` keeps the tree."""
    install_suite(session, "[parquet]")
    session.run("python", "tests/bench/readers_tree.py", *session.posargs)


@nox.session
def overhead(session: nox.Session) -> None:
    """Suite vs bare PyTorch: throughput ratio of the training step (interleaved with a bare DDP
    step in the same ranks) and busbw ratio (all-reduce loop).

    `nox -s overhead -- --only train --workloads resnet50`: torchvision's ResNet-50, which needs
    the matching torch/torchvision pair (VISION_PAIR) installed instead of the default torch."""
    if "resnet50" in session.posargs:
        session.install(*VISION_PAIR)
        session.install("-e", ".[vision]")
    else:
        install_suite(session)
    session.run("python", "tests/bench/overhead.py", *session.posargs)


@nox.session
def models(session: nox.Session) -> None:
    """The standard models' tests with torchvision installed (a matching torch pair): any
    torchvision arch, the GPT-2-class LM, the plugin example. `nox -s models -- -k resnet`."""
    session.install(*VISION_PAIR)
    session.install("-e", ".[dev,vision]")
    tests = ["tests/test_vision.py", "tests/test_gpt2.py", "tests/test_plugins.py"]
    tests += ["tests/test_scaling_models.py", "tests/test_step_options.py"]
    session.run("pytest", "-rs", *tests, *session.posargs)
