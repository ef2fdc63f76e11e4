"""Workload plugins that misbehave: each is one line naming it and a failed run (or a plugin
left out), never the end of the command, another workload's failure or a run that hangs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dpsuite.runtime import distributed
from dpsuite.workloads.contained import Escaped, call_contained
from tests.conftest import read_run, run_subprocess

# A workload whose `load_data` / `build_model` misbehave as `workload.mode` says.
HOSTILE_MODULE = '''
import os, sys, time
from dataclasses import dataclass
import torch
import torch.distributed as dist
from dpsuite.workloads import Data, Workload, WorkloadConfig

@dataclass
class HostileConfig(WorkloadConfig):
    """Random points; `mode` says how it misbehaves."""
    name: str = "hostile"
    num_samples: int = 200
    mode: str = "ok"

def rank():
    return dist.get_rank() if dist.is_initialized() else None

class Hostile(Workload):
    Config = HostileConfig
    def num_train(self):
        return self.config.num_samples * 4 // 5
    def build_model(self):
        if self.config.mode == "build_exit":
            sys.exit(0)
        return torch.nn.Linear(4, 10)
    def load_data(self):
        mode = self.config.mode
        if mode in ("exit0", "exit3"):
            sys.exit(int(mode[-1]))
        if mode == "interrupt":
            raise KeyboardInterrupt
        if mode == "hang" or (mode == "hang_in_ranks" and rank() is not None):
            time.sleep(3600)
        if mode == "rank1_raises" and rank() == 1:
            raise ValueError("rank 1 cannot read its shard")
        g = torch.Generator().manual_seed(0)
        x = torch.randn(self.config.num_samples, 4, generator=g)
        y = torch.randint(0, 10, (self.config.num_samples,), generator=g)
        if mode == "nan":
            x[3, 1] = float("nan")
        if mode == "label":
            y[-1] = 10
        n = 0 if mode == "empty" else self.num_train()
        return Data(x[:n], y[:n], x[n:], y[n:])
'''
# Modules whose import misbehaves, and one that leaves a mark when it is imported at all.
IMPORTED_MARK = "plugin-imported"
MODULES = {
    "hostile": HOSTILE_MODULE,
    "exits_at_import": "import sys\nsys.exit(7)\n",
    "interrupts_at_import": "raise KeyboardInterrupt\n",
    "blocks_at_import": "import time\ntime.sleep(3600)\n",
    "marks_import": f"import os\nopen(os.environ['MARK_DIR'] + '/{IMPORTED_MARK}', 'w').close()\n",
}
ENTRY_POINTS = """[dpsuite.workloads]
hostile = hostile:Hostile
exits = exits_at_import:Model
interrupts = interrupts_at_import:Model
blocks = blocks_at_import:Model
mnist1d_mlp = marks_import:Model
sub/dir = marks_import:Model
../../esc = marks_import:Model
ünï = marks_import:Model
"""
IMPORT_LIMIT_S = 3


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """A package installed as pip would (a .dist-info with entry_points.txt) offering them."""
    root = tmp_path_factory.mktemp("hostile")
    dist_info = root / "site" / "hostile_plugins-1.0.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: hostile-plugins\nVersion: 1.0\n"
    )
    (dist_info / "entry_points.txt").write_text(ENTRY_POINTS, encoding="utf-8")
    for name, text in MODULES.items():
        (root / "site" / f"{name}.py").write_text(text)
    (root / "marks").mkdir()
    return root


def dpsuite(site: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    """`python -m dpsuite ARGS` with the plugins installed (a hang fails at ``timeout``)."""
    env = {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(site / "site"), os.getenv("PYTHONPATH")])),
        "MARK_DIR": str(site / "marks"),
        "DPSUITE_PLUGIN_IMPORT_TIMEOUT_S": str(IMPORT_LIMIT_S),
    }
    return run_subprocess(*args, timeout=timeout, env=env)


def runs_by_mode(results: Path) -> dict[str, dict]:
    records = [read_run(p.parent) for p in results.glob("*/run.json")]
    return {r["config"]["workload"]["mode"]: r for r in records}


# ---- a workload's own code: each misdeed is a failed run naming it -------------------------------

# workload.mode -> the error its run records, after "WorkloadError: workload 'hostile': "
ONE_PROCESS = {
    "exit0": "load_data raised SystemExit: sys.exit(0)",
    "exit3": "load_data raised SystemExit: sys.exit(3)",
    "interrupt": "load_data raised KeyboardInterrupt",
    "build_exit": "build_model raised SystemExit: sys.exit(0)",
    "hang": "load_data did not return within 2 s (data.load_timeout_s)",
    "nan": "its data cannot be trained on: train inputs hold NaN or infinite values",
    "empty": "its data cannot be trained on: train split has 0 inputs and 0 targets",
    "label": "its data cannot be trained on: eval labels are not integers in [0, 10)",
}


@pytest.fixture(scope="module")
def one_process_sweep(site, tmp_path_factory):
    """A sweep of one run per misdeed and a good one, all in the command's process."""
    results = tmp_path_factory.mktemp("one-process")
    done = dpsuite(
        site,
        "run",
        "-m",
        "workload=hostile",
        f"workload.mode={','.join(['ok', *ONE_PROCESS])}",
        "data.load_timeout_s=2",
        "train.max_steps=2",
        f"results_dir={results}",
    )
    return done, runs_by_mode(results)


@pytest.mark.parametrize("mode", list(ONE_PROCESS))
def test_a_workload_misdeed_is_a_failed_run_naming_it(one_process_sweep, mode):
    done, runs = one_process_sweep
    record = runs[mode]
    error = f"WorkloadError: workload 'hostile': {ONE_PROCESS[mode]}"
    assert record["status"] == "failed" and record["error"] == error
    lines = [line for line in done.stderr.splitlines() if record["run_id"] in line]
    assert lines == [f"{record['run_id']}: failed: {error}"], done.stderr


def test_the_sweep_goes_on_and_ends_non_zero_counting_them(one_process_sweep):
    done, runs = one_process_sweep
    assert runs["ok"]["status"] == "complete"
    assert done.returncode == 1, done.stderr
    assert f"1 complete, {len(ONE_PROCESS)} failed" in done.stdout
    assert "not run" not in done.stdout and "Traceback" not in done.stderr


@pytest.mark.multiproc
def test_with_workers_each_rank_own_failure_is_recorded(site, tmp_path):
    """With 2 workers: a sys.exit(0) fails the run (never `running`); rank 1's own error is
    recorded, not rank 0's "Connection closed by peer"; a load_data that hangs on the ranks
    only (the launcher's own load went through) fails on them at the time limit."""
    done = dpsuite(
        site,
        "run",
        "-m",
        "workload=hostile",
        "workload.mode=exit0,rank1_raises,hang_in_ranks",
        "workers=2",
        "data.load_timeout_s=3",
        "train.max_steps=2",
        f"results_dir={tmp_path}",
    )
    assert done.returncode == 1 and "3 failed" in done.stdout, done.stderr
    runs = runs_by_mode(tmp_path)
    assert {r["status"] for r in runs.values()} == {"failed"}
    assert runs["exit0"]["error"].endswith("load_data raised SystemExit: sys.exit(0)")
    assert runs["rank1_raises"]["error"] == (
        "rank 1: WorkloadError: workload 'hostile': load_data raised ValueError: "
        "rank 1 cannot read its shard"
    )
    assert runs["hang_in_ranks"]["error"].endswith(
        "load_data did not return within 3 s (data.load_timeout_s)"
    )
    assert runs["hang_in_ranks"]["error"].startswith(("rank 0: ", "rank 1: "))


def test_a_rank_own_error_is_named_before_a_peer_echo(tmp_path):
    """Rank 0 exited first with the gloo error its collective got when rank 1 went away:
    the run names rank 1's own error."""
    echo = "RuntimeError: [gloo/transport/tcp/pair.cc:534] Connection closed by peer [::1]:1"
    (tmp_path / "error-0.json").write_text(json.dumps({"error": echo, "echo": True}))
    own = "WorkloadError: workload 'w': load_data raised ValueError: bad"
    (tmp_path / "error-1.json").write_text(json.dumps({"error": own, "echo": False}))
    assert distributed.failure_reason([(0, 1)], tmp_path) == f"rank 1: {own}"
    assert distributed.is_peer_echo(RuntimeError(echo.split(": ", 1)[1]))
    assert not distributed.is_peer_echo(ValueError("Connection closed by peer"))


def test_contained_code_cannot_end_the_caller():
    def exits():
        sys.exit(5)

    def interrupts():
        raise KeyboardInterrupt

    for fn, how in [(exits, "SystemExit: sys.exit(5)"), (interrupts, "KeyboardInterrupt")]:
        with pytest.raises(Escaped, match=re.escape(how)):
            call_contained(fn)
    with pytest.raises(Escaped, match="did not return within 0.2 s") as caught:
        call_contained(lambda: __import__("time").sleep(3600), 0.2)
    assert caught.value.cause is None
    assert call_contained(lambda: 42, 5) == 42


# ---- importing plugins: only the chosen one, contained -------------------------------------------


def test_a_built_in_run_imports_no_plugin(site, tmp_path):
    """Plugins that exit, interrupt or block at import, and one shadowing the built-in: the
    built-in runs as if none were installed (one warning for the shadowing one)."""
    done = dpsuite(
        site,
        "run",
        "workload=mnist1d_mlp",
        "workload.num_samples=200",
        "train.max_steps=2",
        f"results_dir={tmp_path}",
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        "dpsuite: warning: workload plugin 'mnist1d_mlp' (marks_import:Model) is ignored: "
        "it shadows the built-in workload of that name"
    ]
    assert not (site / "marks" / IMPORTED_MARK).exists()


def test_listing_leaves_each_unusable_plugin_out_with_one_warning(site):
    done = dpsuite(site, "run", "--help")
    assert done.returncode == 0, done.stderr
    text = done.stdout.split("  workload=", 1)[1].split("  lr_rule=", 1)[0]
    listed = " ".join(text.split("one of:", 1)[1].split()).split(", ")
    assert "hostile" in listed and "mnist1d_mlp" in listed
    warnings = done.stderr.splitlines()
    for name in ("exits", "interrupts", "blocks", "mnist1d_mlp", "sub/dir", "../../esc", "ünï"):
        assert name == "mnist1d_mlp" or name not in listed
        assert sum(f"workload plugin '{name}'" in w for w in warnings) == 1, done.stderr
    assert all(w.startswith("dpsuite: warning: workload plugin '") for w in warnings)
    assert len(warnings) == 7


@pytest.mark.parametrize(
    "name,why",
    [
        ("exits", "(exits_at_import:Model): cannot import it: SystemExit: sys.exit(7)"),
        ("interrupts", "(interrupts_at_import:Model): cannot import it: KeyboardInterrupt"),
        (
            "blocks",
            f"(blocks_at_import:Model): cannot import it: its import did not finish within "
            f"{IMPORT_LIMIT_S} s (DPSUITE_PLUGIN_IMPORT_TIMEOUT_S sets the limit)",
        ),
    ],
)
def test_choosing_a_plugin_whose_import_misbehaves_is_one_line(site, name, why):
    done = dpsuite(site, "run", f"workload={name}", "--dry-run")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"dpsuite: error: workload plugin '{name}' {why}"]
