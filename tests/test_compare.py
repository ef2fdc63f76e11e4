"""`dpsuite compare` says what differs between the machines' runs, and will not call a
regression on repeats too scattered to show one."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from tests import report_trees as trees

QUIET_A = {1: [1000.0, 1040.0, 960.0], 2: [1900.0, 1950.0, 1850.0]}
# B: as fast at 1 worker; at 2 workers its repeats range from 200 to 900 samples/s.
NOISY_B = {1: [1010.0, 990.0, 1030.0], 2: [200.0, 900.0, 250.0]}


def headline_of(report_dir: Path) -> list[str]:
    top = (report_dir / "index.md").read_text().split("\n## ", 1)[0]
    return [line[4:-2] for line in top.splitlines() if line.startswith("- **")]


def set_run_settings(root: Path, threads: int, env: dict[str, str]) -> None:
    """Record how the runs were made (threads per worker, environment), as a run records them;
    neither is part of the config its run id hashes."""
    for file in root.rglob("run.json"):
        record = json.loads(file.read_text())
        record["threads_per_worker"] = threads
        record["hardware"].update(threads_per_worker=threads, env=env)
        file.write_text(json.dumps(record))


@pytest.fixture(scope="module")
def machines(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("compare")
    trees.write_repeated(root / "a", "setupA", QUIET_A)
    trees.write_repeated(root / "b", "setupB", NOISY_B)
    set_run_settings(root / "a", threads=1, env={"GLOO_SOCKET_IFNAME": "lo"})
    set_run_settings(root / "b", threads=2, env={"GLOO_SOCKET_IFNAME": "lo", "NCCL_ALGO": "Ring"})
    return root / "a", root / "b"


def test_machine_lines_name_every_setting_that_differs(dpsuite, capsys, machines, tmp_path):
    a, b = machines
    out = tmp_path / "cmp"
    assert dpsuite("compare", str(a), str(b), "--out", str(out)) == 0
    md = (out / "index.md").read_text()
    line_a = next(line.strip() for line in md.splitlines() if "Machine `setupA`" in line)
    line_b = next(line.strip() for line in md.splitlines() if "Machine `setupB`" in line)
    assert line_a.endswith("; differs: threads/worker 1, NCCL_ALGO=unset"), line_a
    assert line_b.endswith("; differs: threads/worker 2, NCCL_ALGO=Ring"), line_b
    assert "GLOO_SOCKET_IFNAME" not in md  # the same on both sides


def test_a_wide_interval_is_said_in_the_headline(dpsuite, capsys, machines, tmp_path):
    a, b = machines
    out = tmp_path / "cmp"
    assert dpsuite("compare", str(a), str(b), "--out", str(out)) == 0
    printed = capsys.readouterr().out
    headline = headline_of(out)
    assert headline[1].startswith("Too noisy to call: rerun. 1 of 2 configurations on `setupB`")
    assert "mnist1d_mlp, 2 workers, 32/worker" in headline[1]
    ratios = pd.read_csv(out / "ratios.csv").set_index("workers")
    assert list(ratios["too_noisy"]) == [False, True]
    assert ratios.loc[2, "ratio_spread"] > 2 > ratios.loc[1, "ratio_spread"]
    assert "too noisy" in printed.split("2 workers", 1)[1].splitlines()[0]


def test_the_gate_refuses_to_call_a_regression_on_a_wide_interval(
    dpsuite, capsys, machines, tmp_path
):
    a, b = machines
    gate = ["--fail-below", "0.95"]
    assert dpsuite("compare", str(a), str(b), "--out", str(tmp_path / "c1"), *gate) == 3
    err = capsys.readouterr().err
    assert "dpsuite: regression" not in err
    (line,) = [x for x in err.splitlines() if x.startswith("dpsuite: too noisy to call: ")]
    assert line.startswith("dpsuite: too noisy to call: mnist1d_mlp, 2 workers, 32/worker: ")
    assert line.endswith("apart (limit 2×): rerun, or --allow-noisy to gate on it"), line
    assert "too noisy to call (interval wider than 2×)" in headline_of(tmp_path / "c1")[-1]
    # asked to, it calls the regression (the whole interval is below the gate)
    out = tmp_path / "c2"
    assert dpsuite("compare", str(a), str(b), "--out", str(out), *gate, "--allow-noisy") == 1
    assert "dpsuite: regression: mnist1d_mlp, 2 workers" in capsys.readouterr().err
    # a wider limit, stated, also lets it be called
    out = tmp_path / "c3"
    assert dpsuite("compare", str(a), str(b), "--out", str(out), *gate, "--max-spread", "50") == 1


@pytest.mark.parametrize("value", ["1", "0.5", "nan"])
def test_max_spread_bad_value_is_one_line(dpsuite, capsys, machines, tmp_path, value):
    a, b = machines
    assert (
        dpsuite("compare", str(a), str(b), "--out", str(tmp_path / "c"), "--max-spread", value) == 2
    )
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("dpsuite: error: ") and "max-spread" in err
