"""Developer and user sessions: `nox -s tests`, `nox -s demo`, `nox -s lint`, `nox -s bench`,
`nox -s overhead`.

Each session installs what it needs into its own virtualenv. On a machine without CUDA, torch
comes from PyTorch's CPU index (a ~200 MB wheel) rather than PyPI's default multi-GB CUDA build.
Set DPSUITE_TORCH to choose another torch requirement (e.g. "torch==2.5.1").
"""

from __future__ import annotations

import os
import shutil

import nox

nox.options.sessions = ["lint", "tests"]
nox.options.reuse_existing_virtualenvs = True

TORCH = os.environ.get("DPSUITE_TORCH", "torch==2.13.0")
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def has_cuda() -> bool:
    return shutil.which("nvidia-smi") is not None


def install_torch(session: nox.Session) -> None:
    if has_cuda():
        session.install(TORCH)
    else:
        session.install(TORCH, "--extra-index-url", CPU_INDEX)


def install_suite(session: nox.Session, extras: str = "") -> None:
    install_torch(session)
    session.install("-e", f".{extras}")


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite (unit, multi-process DDP, end to end); slow stress tests excluded."""
    install_suite(session, "[dev,slurm]")
    session.run("pytest", "-m", "not slow", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff lint and format check."""
    session.install("ruff==0.17.6")  # pinned: formatting differs across releases
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def demo(session: nox.Session) -> None:
    """The main job on a fresh machine."""
    install_suite(session)
    session.run("dpsuite", "demo", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """pytest-benchmark benchmarks (tests/bench): all-reduce sizes, one step per workload."""
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
def overhead(session: nox.Session) -> None:
    """Suite vs bare PyTorch: throughput ratio (DDP loop) and busbw ratio (all-reduce loop)."""
    install_suite(session)
    session.run("python", "tests/bench/overhead.py", *session.posargs)
