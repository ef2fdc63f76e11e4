"""`dpsuite demo`: what its presets run, and a whole (shrunk) demo end to end."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from dpsuite.conf import compose as preflight
from dpsuite.sweep import demo
from dpsuite.sweep import runner as sweep


def plan(part: str):
    return preflight.plan([f"+sweep={part}"], multirun=True).specs


def test_demo_runs_scaling_baseline_and_convergence_parts():
    assert sweep.preset_parts("demo") == {
        "scaling": "demo_scaling",
        "baseline": "demo_baseline",
        "convergence": "demo_convergence",
    }


def test_demo_scaling_repeats_a_model_that_scales_and_one_that_does_not():
    specs = plan("demo_scaling")
    points = Counter((s.cfg.workload.name, s.workers, s.per_worker_batch) for s in specs)
    assert points == {(w, n, 32): 3 for w in ("mnist1d_mlp", "tiny_gpt") for n in (1, 2)}, (
        "every point three times"
    )
    assert {s.cfg.repeat for s in specs} == {0, 1, 2} and len({s.run_id for s in specs}) == 12
    assert {s.cfg.mode for s in specs} == {"ddp"} and {s.threads_per_worker for s in specs} == {1}


def test_demo_convergence_is_the_convergence_recipe_on_full_data():
    full = plan("convergence_budget")[0]
    conv, base = plan("demo_convergence"), plan("demo_baseline")
    grid = {(s.cfg.lr_rule.name, s.global_batch) for s in conv}
    rules = ("naive", "linear", "linear_warmup", "sqrt")
    assert grid == {(r, b) for r in rules for b in (128, 512, 2048)}
    assert [(s.cfg.lr_rule.name, s.global_batch) for s in base] == [("naive", 32)]
    recipe = ("epochs", "base_lr", "base_batch", "schedule")
    for spec in [*conv, *base]:  # the committed reference's recipe, one seed
        assert spec.cfg.workload == full.cfg.workload  # full data: 40k training samples
        assert [spec.summary()[k] for k in recipe] == [full.summary()[k] for k in recipe]
        assert spec.cfg.seed == 0
    # the same group in the report: the baseline only differs in batch and rule
    assert {s.cfg.results_dir for s in base} == {"results/demo/baseline"}


def test_hardware_tag_reaches_the_benchmark():
    assert demo.hardware_tag(["workers=1", "hardware.tag=laptop"]) == "laptop"
    assert demo.hardware_tag(["hardware.tag=null"]) is None
    assert demo.hardware_tag([]) is None


def test_the_demo_ends_with_where_its_time_went():
    seconds = {"demo_scaling": 80.0, "demo_baseline": 50.5, "all-reduce benchmark": 12.0}
    lines = demo.time_table({**seconds, "report": 7.5}, data_seconds=14.25).splitlines()
    assert lines[0] == "where the time went (wall seconds):"
    assert [line.split() for line in lines[1:3]] == [
        ["sweep", "demo_scaling", "80.0"],
        ["sweep", "demo_baseline", "50.5"],
    ]
    assert lines[3].split() == ["all-reduce", "benchmark", "12.0"]
    assert lines[5].startswith("  (data generated or read") and lines[5].endswith(" 14.2")
    assert lines[6].split() == ["total", "150.0"]  # the data is inside the sweeps: not added
    assert len({len(line) for line in lines[1:]}) == 1  # one column of seconds


@pytest.mark.slow
def test_a_shrunk_demo_end_to_end(tmp_path, monkeypatch, capsys):
    """The demo's code path on tiny data: sweeps, all-reduce benchmark, summary, headline,
    report; then a rerun resumes without running anything again."""
    from dpsuite.cli.main import main

    monkeypatch.chdir(tmp_path)
    small = [
        "results_dir=results/demo",
        "workload.num_samples=1000",  # 800 training samples: 12 steps per epoch at 2 x 32
        "train.epochs=2",
        "train.max_steps=12",  # 7 timed steps after the warm-up
        "workers=1,2",
    ]
    assert main(["demo", *small]) == 0
    out = capsys.readouterr().out
    assert "In short:" in out and "report written to reports/demo/index.html" in out
    assert "All-reduce bus bandwidth (2 ranks" in out
    assert "where the time went (wall seconds):" in out and "sweep demo_convergence" in out
    report = Path("reports/demo/index.md").read_text()
    assert "## Findings" in report and "throughput.png" in report
    benches = list(Path("results/demo/comm_bench").glob("*/comm_bench.json"))
    assert len(benches) == 1
    assert main(["demo", *small]) == 0  # resumes: complete runs and the benchmark are kept
    assert list(Path("results/demo/comm_bench").glob("*/comm_bench.json")) == benches
    assert "already complete" in capsys.readouterr().out
