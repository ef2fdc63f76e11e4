"""The recipes of docs/development.md ("## Contributing"), followed on throwaway examples in a
staged copy of the package (see tests/recipes.py): each touches exactly the files its bullet
names, and the addition works from the command line and in the contract tests."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dpsuite import sync, workloads
from dpsuite.analysis.report import build
from dpsuite.optim import lr_rules
from tests.recipes import REPO, Staged, documented, follow

QUICK_RUN = ["workers=1", "train.max_steps=2", "timing.warmup_steps=0"]
QUICK_RUN += ["timing.calibration_steps=0", "train.eval_at_start=false"]


def class_name(name: str) -> str:
    return "".join(part.title() for part in name.split("_"))


def only_run_json(results_dir: Path) -> dict:
    (run,) = results_dir.rglob("run.json")
    return json.loads(run.read_text())


def passed(done) -> bool:
    """pytest ran and passed at least one test, and failed or skipped none."""
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    return done.returncode == 0 and " passed" in summary and "skipped" not in summary


# --- A workload -------------------------------------------------------------------------------

WORKLOAD_CONFIG = '''"""The example workload's config."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from dpsuite.workloads.configs.base import WorkloadConfig


@dataclass
class {cls}Config(WorkloadConfig):
    """Two Gaussian blobs told apart by a small MLP."""

    class_path: ClassVar[str] = "dpsuite.workloads.{name}:{cls}"
    small: ClassVar[dict[str, int]] = {{"num_samples": 200}}

    name: str = "{name}"
    num_samples: int = field(default=1000, metadata={{"ge": 10}})
    """Samples generated: 80 % train, 20 % eval."""
    hidden: int = field(default=16, metadata={{"ge": 1}})
    """Hidden units of the example MLP."""
    base_batch: int = 16
    target_acc: float = 0.6
'''

WORKLOAD = '''"""The example workload: two Gaussian blobs and an MLP."""

from __future__ import annotations

import torch
from torch import nn

from dpsuite.workloads.base import Data, Workload, train_share
from dpsuite.workloads.configs.{name} import {cls}Config


class {cls}(Workload):
    Config = {cls}Config
    classes = 2

    def num_train(self) -> int:
        return train_share(self.config.num_samples)

    def build_model(self) -> nn.Module:
        h = self.config.hidden
        return nn.Sequential(nn.Linear(2, h), nn.ReLU(), nn.Linear(h, 2))

    def load_data(self) -> Data:
        g = torch.Generator().manual_seed(0)
        y = torch.randint(0, 2, (self.config.num_samples,), generator=g)
        x = torch.randn(len(y), 2, generator=g) + 2.0 * y[:, None] - 1.0
        cut = self.num_train()
        return Data(x[:cut], y[:cut], x[cut:], y[cut:])
'''


def add_workload(tree: Staged, name: str) -> None:
    cls = class_name(name)
    tree.write(f"workloads/configs/{name}.py", WORKLOAD_CONFIG.format(name=name, cls=cls))
    tree.write(f"workloads/{name}.py", WORKLOAD.format(name=name, cls=cls))
    the_list = "workloads/configs/__init__.py"
    tree.insert(
        the_list,
        "\n# name -> config",
        f"from dpsuite.workloads.configs.{name} import {cls}Config\n",
    )
    tree.insert(the_list, "    )\n}", f"        {cls}Config,\n")


def test_a_workload(tmp_path):
    tree = follow("A workload", limit=3, steps=add_workload, name="blobs_mlp", tmp_path=tmp_path)
    shown = tree.dpsuite("run", "--help", "workload=blobs_mlp")
    assert shown.returncode == 0 and "workload.hidden" in shown.stdout, shown.stderr
    out = tmp_path / "results"
    done = tree.dpsuite("run", "workload=blobs_mlp", *QUICK_RUN, f"results_dir={out}")
    assert done.returncode == 0, done.stderr
    assert only_run_json(out)["status"] == "complete"
    contract = tree.pytest(
        "tests/test_workloads.py::test_every_config_names_its_workload_class[blobs_mlp]",
        "tests/test_throughput_workloads.py::test_every_built_in_workload_states_its_small_configuration",
    )
    assert passed(contract), contract.stdout[-2000:]


# --- An LR rule -------------------------------------------------------------------------------


def add_lr_rule(tree: Staged, name: str) -> None:
    rule = f'        Rule("{name}", 1 / 3, LRRuleConfig("{name}")),\n'
    tree.insert("suite/optim/lr_rules.py", "    )\n}", rule)


def test_an_lr_rule(tmp_path):
    tree = follow("An LR rule", limit=2, steps=add_lr_rule, name="cube_root", tmp_path=tmp_path)
    out = tmp_path / "results"
    batch = ["batch.per_worker=256", "workload.num_samples=2000"]  # k = 256 / 32 = 8
    done = tree.dpsuite("run", "lr_rule=cube_root", *batch, *QUICK_RUN, f"results_dir={out}")
    assert done.returncode == 0, done.stderr
    run = only_run_json(out)
    assert run["status"] == "complete" and run["peak_lr"] == pytest.approx(0.1 * 8 ** (1 / 3))
    assert run["lr_rule_order"] == len(lr_rules.RULES)  # its place in the reports: last
    contract = tree.pytest("tests/test_lr_rules.py", "-k", "cube_root")
    assert passed(contract), contract.stdout[-2000:]


# --- A synchronization strategy ---------------------------------------------------------------

STRATEGY_CONFIG = '''@dataclass
class {cls}Config(SyncConfig):
    """All-reduce of every bucket through a Python hook."""

    class_path: ClassVar[str] = "dpsuite.sync.{name}:{cls}"
    name: str = "{name}"


'''

STRATEGY = '''"""The example strategy: DDP's all-reduce of every bucket, counted in a hook."""

from __future__ import annotations

from torch import nn

from dpsuite.sync.base import SyncStrategy, ddp_wrap
from dpsuite.sync.config import {cls}Config
from dpsuite.sync.hooks import CommHook, counted_allreduce


class {cls}(SyncStrategy):
    Config = {cls}Config

    def wrap(self, model: nn.Module, bucket_cap_mb: float) -> nn.Module:
        return ddp_wrap(model, self.device, bucket_cap_mb)

    def comm_hook(self) -> CommHook:
        return CommHook(None, counted_allreduce(self.counter, self.world_size))
'''


def add_strategy(tree: Staged, name: str) -> None:
    cls = class_name(name)
    tree.write(f"suite/sync/{name}.py", STRATEGY.format(name=name, cls=cls))
    the_list = "suite/sync/config.py"
    tree.insert(the_list, "# name -> config", STRATEGY_CONFIG.format(name=name, cls=cls))
    tree.insert(the_list, "    )\n}", f"        {cls}Config,\n")


@pytest.mark.multiproc
@pytest.mark.slow  # 13 s: `nox -s stress`
def test_a_synchronization_strategy(tmp_path):
    steps, name = add_strategy, "hooked_allreduce"
    tree = follow("A synchronization strategy", 3, steps, name, tmp_path)
    out = tmp_path / "results"
    args = [f"sync={name}", *QUICK_RUN, "workers=2", "workload.num_samples=2000"]
    done = tree.dpsuite("run", *args, f"results_dir={out}")
    assert done.returncode == 0, done.stderr
    run = only_run_json(out)
    assert run["status"] == "complete" and run["sync"] == name
    assert run["metrics"]["wire_bytes_per_step"] > 0  # its hook counted what it sent
    assert run["sync_order"] == len(sync.CONFIGS)  # its place in the list: last
    contract = tree.pytest(
        f"tests/test_sync_config.py::test_every_config_names_its_strategy_class[{name}]"
    )
    assert passed(contract), contract.stdout[-2000:]


# --- A measurement ----------------------------------------------------------------------------

PROBE = '''"""The example measurement: optimizer steps seen by the probe."""

from __future__ import annotations

from typing import Any

from dpsuite.measure.probes import Probe


class {cls}(Probe):
    def __init__(self) -> None:
        self.steps = 0

    def on_step_end(self, step: int) -> None:
        self.steps += 1

    def metrics(self) -> dict[str, Any]:
        return {{"{name}": self.steps}}
'''


def add_measurement(tree: Staged, name: str) -> None:
    cls = class_name(name)
    tree.write(f"suite/measure/{name}.py", PROBE.format(name=name, cls=cls))
    train = "suite/engine/train.py"
    tree.insert(
        train, "from dpsuite.measure.probes import", f"from dpsuite.measure.{name} import {cls}\n"
    )
    tree.insert(train, "    probes.append(ExposedCommProbe(", f"    probes.append({cls}())\n")
    field = f'    Field("{name}", "count", "int", "optimizer steps the example probe saw"),\n'
    tree.insert("suite/results/schema.py", '    Field(\n        "grad_noise_scale",\n', field)


def test_a_measurement(tmp_path):
    name = "probe_steps"
    tree = follow("A measurement", limit=3, steps=add_measurement, name=name, tmp_path=tmp_path)
    out = tmp_path / "results"
    done = tree.dpsuite("run", *QUICK_RUN, f"results_dir={out}")
    assert done.returncode == 0, done.stderr
    run = only_run_json(out)
    assert run["status"] == "complete" and run["metrics"][name] == 2
    page = tree.dpsuite("schema")  # what docs/results-schema.md is regenerated from
    assert f"| `{name}` | count | int |" in page.stdout, page.stdout[-2000:]
    read = f"from dpsuite import results; print(results.load({str(out)!r})[{name!r}].tolist())"
    loaded = tree.python("-c", read)  # the gate trusts the record and the column loads
    assert loaded.returncode == 0 and loaded.stdout.strip() == "[2]", loaded.stderr
    contract = tree.pytest("tests/test_hostile_results.py", "-k", name)
    assert passed(contract), contract.stdout[-2000:]


# --- A report section -------------------------------------------------------------------------

SECTION = '''"""The example section: how many runs a results tree holds."""

from __future__ import annotations

from matplotlib.figure import Figure

from dpsuite.analysis.report import studies
from dpsuite.analysis.report.section import Section

TOPIC = "Run count"
PLOTS = ("{name}",)
HEADLINE = {{"{name}": {rank}}}


def section(context: studies.Context) -> Section:
    count = len(context.tree.runs)
    part = Section(findings=[f"The results hold {{count}} runs."])
    part.plot("{name}", lambda: draw(count), "Runs", "How many runs the results hold.")
    part.candidate("{name}", f"{{count}} runs counted.")
    return part


def draw(count: int) -> Figure:
    fig = Figure()
    fig.add_subplot().bar(["runs"], [count])
    return fig
'''

SECTION_TEST = '''"""The example section's finding."""

from dpsuite.analysis.report import data, studies
from dpsuite.analysis.report.sections import {name}


def test_it_counts_every_run(scaling_tree):
    tree = data.load_tree(scaling_tree)
    part = {name}.section(studies.context(tree))
    assert part.findings == [f"The results hold {{len(tree.runs)}} runs."]
'''


def add_section(tree: Staged, name: str) -> None:
    ranks = [rank for topic in build.SECTIONS for rank in topic.HEADLINE.values()]
    rank = max(ranks) + 1  # after every other section's candidates
    tree.write(f"suite/analysis/report/sections/{name}.py", SECTION.format(name=name, rank=rank))
    build_py = "suite/analysis/report/build.py"
    tree.insert(build_py, "    sync,\n)", f"    {name},\n")
    tree.insert(build_py, "    run_list,\n)\n# Every plot", f"    {name},\n")
    tree.write(f"tests/test_report_{name}.py", SECTION_TEST.format(name=name))


@pytest.mark.slow  # 25 s: `nox -s stress`; the other recipes stay in the default run
def test_a_report_section(tmp_path):
    name = "run_count"
    tree = follow("A report section", limit=3, steps=add_section, name=name, tmp_path=tmp_path)
    results, report = tmp_path / "results", tmp_path / "report"
    done = tree.dpsuite("run", *QUICK_RUN, f"results_dir={results}")
    assert done.returncode == 0, done.stderr
    written = tree.dpsuite("report", str(results), "--out", str(report))
    assert written.returncode == 0, written.stderr
    assert "The results hold 1 runs." in (report / "index.md").read_text()
    assert (report / f"{name}.png").is_file()
    contract = tree.pytest("tests/test_report_sections.py")
    assert passed(contract), contract.stdout[-2000:]
    own = tree.path(f"tests/test_report_{name}.py")  # the staged tests, with their own conftest
    its_test = tree.pytest(str(own), "--rootdir", str(tree.root))
    assert passed(its_test), its_test.stdout[-2000:]


# --- The harness itself, and the docs the recipes name ----------------------------------------


def test_a_recipe_whose_docs_name_other_files_fails(tmp_path):
    """The docs' file list drifting from what the recipe touches is a failure."""
    text = "* **A workload** (files: `workloads/NAME.py`, `workloads/configs/NAME.py`): ..."
    with pytest.raises(AssertionError, match="workloads/configs/__init__.py"):
        follow("A workload", 3, add_workload, "blobs_mlp", tmp_path, text=text)
    with pytest.raises(AssertionError, match="no bullet"):
        documented("A gadget", "x")


def table_row(doc: str, first_cell: str) -> list[str]:
    """The names written as code in the meaning cell of the table row starting ``first_cell``,
    keys (with a dot) and settings (with `=`) left out."""
    for line in (REPO / doc).read_text().splitlines():
        cells = line.split("|")
        if len(cells) > 2 and cells[1].strip() == first_cell:
            names = re.findall(r"`([^`]+)`", cells[3])
            return [n for n in names if "." not in n and "=" not in n]
    raise AssertionError(f"{doc} has no table row {first_cell}")


def first_column(doc: str, header: str) -> list[str]:
    """The names written as code in the first cells of the table whose first header is
    ``header``."""
    lines = (REPO / doc).read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {header} |"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append(line.split("|")[1])
    return re.findall(r"`([^`]+)`", " ".join(rows))


# Each recipe's doc that lists every entry: where the list is, and the entries in their order.
DOC_LISTS = {
    "A workload": (
        "docs/running.md",
        lambda: table_row("docs/running.md", "`workload`"),
        lambda: list(workloads.CONFIGS),
    ),
    "An LR rule": (
        "docs/running.md",
        lambda: table_row("docs/running.md", "`lr_rule`"),
        lambda: list(lr_rules.RULES),
    ),
    "A synchronization strategy": (
        "docs/sync-strategies.md",
        lambda: first_column("docs/sync-strategies.md", "`sync=`"),
        lambda: list(sync.CONFIGS),
    ),
}


@pytest.mark.parametrize("title", list(DOC_LISTS))
def test_the_docs_a_recipe_names_list_every_entry_in_order(title):
    doc, listed, entries = DOC_LISTS[title]
    assert doc in documented(title, "NAME").docs
    assert listed() == entries(), f"{doc} lists {listed()}"
