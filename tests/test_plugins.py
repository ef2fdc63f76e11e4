"""Workloads from other packages: the example plugin installed and run with DDP, a one-off by
import path, and broken plugins (each one error line, never in the way of the others)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, only_run, read_run, run_subprocess

EXAMPLE = REPO / "examples" / "dpsuite-example-plugin"
DATASET_EXAMPLE = REPO / "examples" / "dpsuite-example-dataset"

# A distribution offering four workloads, three of them broken in different ways, written as
# pip would (a .dist-info with entry_points.txt) so that importlib.metadata finds it.
BROKEN_ENTRY_POINTS = """[dpsuite.workloads]
good_mlp = broken_plugins:Good
gone = broken_plugins_missing:Model
not_a_workload = broken_plugins:NotAWorkload
bad_config = broken_plugins:BadConfig
"""
BROKEN_MODULE = '''
from dataclasses import dataclass, field
import torch
from dpsuite.workloads import Data, Workload, WorkloadConfig

@dataclass
class GoodConfig(WorkloadConfig):
    """A linear model on random points."""
    name: str = "good_mlp"
    num_samples: int = field(default=200, metadata={"ge": 10})
    """Points generated."""

class Good(Workload):
    Config = GoodConfig
    def num_train(self):
        return self.config.num_samples * 4 // 5
    def build_model(self):
        return torch.nn.Linear(4, 10)
    def load_data(self):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(self.config.num_samples, 4, generator=g)
        y = torch.randint(0, 10, (self.config.num_samples,), generator=g)
        n = self.num_train()
        return Data(x[:n], y[:n], x[n:], y[n:])

class NotAWorkload:
    pass

@dataclass
class NeedsValue(WorkloadConfig):
    layers: int = field(kw_only=True)  # no default: Hydra cannot compose it

class BadConfig(Good):
    Config = NeedsValue
'''


@pytest.fixture
def with_path(monkeypatch):
    """Put directories on the PYTHONPATH of the `python -m dpsuite` subprocesses."""

    def add(*dirs: Path) -> None:
        parts = [str(d) for d in dirs] + [os.environ.get("PYTHONPATH", "")]
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in parts if p))

    return add


@pytest.fixture
def broken_site(tmp_path, with_path) -> Path:
    site = tmp_path / "site"
    dist = site / "broken_plugins-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugins\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(BROKEN_ENTRY_POINTS)
    (site / "broken_plugins.py").write_text(BROKEN_MODULE)
    with_path(site)
    return site


def error_line(done: subprocess.CompletedProcess) -> str:
    lines = done.stderr.strip().splitlines()
    assert done.returncode != 0 and lines, done.stdout
    return lines[-1]


def install(example: Path, tmp_path: Path) -> Path:
    """pip-install an example plugin into a directory of its own; the directory."""
    if importlib.util.find_spec("setuptools") is None:
        pytest.skip("building the example plugin without an index needs setuptools installed")
    source = tmp_path / example.name
    shutil.copytree(example, source)  # the build writes next to the sources: not in the repo
    site = tmp_path / f"site-{example.name}"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
    subprocess.run([*pip, "--target", str(site), str(source)], check=True, timeout=300)
    return site


@pytest.mark.multiproc
@pytest.mark.slow  # `nox -s stress`: the dataset plugin's test installs and runs one by default
def test_installed_example_plugin_trains_with_ddp_and_is_reported(tmp_path, with_path):
    with_path(install(EXAMPLE, tmp_path))

    results = tmp_path / "results"
    done = run_subprocess(
        "run", "workload=spirals_mlp", "workers=2", "workload.epochs=2", f"results_dir={results}"
    )
    assert done.returncode == 0, done.stderr
    record = read_run(only_run(results))
    assert record["status"] == "complete" and record["workload"] == "spirals_mlp"
    assert record["workers"] == 2 and record["metrics"]["samples_per_s"] > 0
    assert record["config"]["workload"]["arms"] == 3

    report = run_subprocess("report", str(results), "--out", str(tmp_path / "report"))
    assert report.returncode == 0, report.stderr
    html = "".join(p.read_text() for p in (tmp_path / "report").rglob("*.md"))
    assert "spirals_mlp" in html

    help_text = run_subprocess("run", "--help", "workload=spirals_mlp").stdout
    assert "workload.arms=3" in help_text and "Spiral arms (= classes)." in help_text
    typo = run_subprocess("run", "workload=spirals_mpl")
    assert "did you mean spirals_mlp?" in error_line(typo)
    bad = run_subprocess("run", "workload=spirals_mlp", "workload.arms=1")
    assert error_line(bad) == "dpsuite: error: workload.arms must be an integer >= 2, got 1"


def test_a_workload_by_import_path_runs_without_packaging(tmp_path, broken_site):
    results = tmp_path / "results"
    done = run_subprocess(
        "run", "workload=broken_plugins:Good", "train.max_steps=3", f"results_dir={results}"
    )
    assert done.returncode == 0, done.stderr
    run_dir = only_run(results)
    assert ":" not in run_dir.name and run_dir.name.startswith("broken_plugins.Good-")
    assert read_run(run_dir)["workload"] == "broken_plugins:Good"


def test_another_groups_unknown_choice_beside_an_import_path_is_named(broken_site):
    """An LR rule nobody offers, beside a workload named by its import path, is the LR rule's
    error (it was once reported as an unknown workload)."""
    done = run_subprocess("run", "workload=broken_plugins:Good", "lr_rule=const")
    assert error_line(done).startswith("dpsuite: error: unknown lr_rule 'const'")


@pytest.mark.parametrize(
    "choice,expected",
    [
        (
            "gone",
            "workload plugin 'gone' (broken_plugins_missing:Model): cannot import it: "
            "ModuleNotFoundError: No module named 'broken_plugins_missing'",
        ),
        (
            "not_a_workload",
            "workload plugin 'not_a_workload' (broken_plugins:NotAWorkload): "
            "<class 'broken_plugins.NotAWorkload'> is not a subclass of dpsuite.workloads.Workload",
        ),
        (
            "bad_config",
            "workload plugin 'bad_config' (broken_plugins:BadConfig): NeedsValue needs a default "
            "for every field",
        ),
        ("broken_plugins:Nope", "workload 'broken_plugins:Nope': cannot import it: AttributeError"),
    ],
)
def test_a_broken_plugin_is_one_line_naming_it(broken_site, choice, expected):
    done = run_subprocess("run", f"workload={choice}", "--dry-run")
    assert error_line(done).startswith(f"dpsuite: error: {expected}")


def test_broken_plugins_never_stop_the_others(tmp_path, broken_site):
    results = tmp_path / "results"
    for workload in ("good_mlp", "mnist1d_mlp"):
        done = run_subprocess(
            "run",
            f"workload={workload}",
            "workload.num_samples=200",
            "train.max_steps=2",
            f"results_dir={results}",
        )
        assert done.returncode == 0, done.stderr
        assert "broken" not in done.stderr
    listed = run_subprocess("run", "--help").stdout
    assert "good_mlp" in listed and "mnist1d_mlp" in listed and "not_a_workload" not in listed


@pytest.mark.multiproc
def test_installed_dataset_plugin_reads_its_files_while_training(tmp_path, with_path):
    """A team's job as it comes: files on disk, a Dataset, dict batches, its own loss and a
    loss target; 2 DDP workers with 2 loader workers each."""
    with_path(install(DATASET_EXAMPLE, tmp_path))
    results = tmp_path / "results"
    done = run_subprocess(
        "run",
        "workload=sensor_regression",
        "workers=2",
        "data.loader_workers=2",
        f"workload.data_dir={tmp_path / 'files'}",
        "workload.num_samples=600",
        "workload.target_loss=0.1",
        f"results_dir={results}",
    )
    assert done.returncode == 0, done.stderr
    record = read_run(only_run(results))
    m = record["metrics"]
    assert record["status"] == "complete" and record["data_form"] == "datasets"
    assert record["target_metric"] == "eval_loss" and m["steps_to_target"] is not None
    assert m["final_eval_loss"] <= 0.1 and m["final_eval_acc"] is None
    assert 0 <= m["data_wait_share"] <= 1 and m["first_batch_s"] > 0
    assert len(list((tmp_path / "files").glob("*.npz"))) == 600
    report = run_subprocess("report", str(results), "--out", str(tmp_path / "report"))
    assert report.returncode == 0, report.stderr
