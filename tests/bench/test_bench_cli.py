"""pytest-benchmark: `dpsuite run --help` in a fresh interpreter, as a user types it, beside a
bare `import torch` (what the workloads' config classes still load). The aim is under 1 s on
an idle machine; it is reported, not asserted: timings depend on what else runs."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO

ROUNDS = 5


def run_python(*args: str) -> None:
    subprocess.run([sys.executable, *args], cwd=REPO, check=True, capture_output=True)


@pytest.mark.parametrize(
    "what,args",
    [
        ("run_help", ("-m", "dpsuite", "run", "--help")),
        ("import_torch", ("-c", "import torch")),
        ("python", ("-c", "pass")),
    ],
)
def test_cli_start_up(benchmark, what, args):
    benchmark.extra_info["command"] = " ".join(args)
    benchmark.pedantic(run_python, args=args, rounds=ROUNDS, warmup_rounds=1)
