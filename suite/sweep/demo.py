"""`dpsuite demo`: the first thing to run on a new machine.

It runs the `demo` sweep preset (a scaling sweep with real worker processes, then a convergence
sweep with simulated workers), measures the all-reduce with `dpsuite comm-bench` (settings under
``comm_bench`` in the preset), prints what it found and the report's headline, and builds the
report. Rerunning it resumes: complete runs and an existing all-reduce benchmark are kept.
Last, it prints where its wall time went: each part, the data, the benchmark, the report.
"""

from __future__ import annotations

import math
import sys
import time
from importlib import resources
from pathlib import Path

import pandas as pd
from omegaconf import OmegaConf

from dpsuite import results
from dpsuite.conf import compose as preflight
from dpsuite.engine import data_memo
from dpsuite.sweep import runner as sweep

DEMO_PRESET = "demo"
REPORTS_DIR = Path("reports")


def run_demo(extra: list[str]) -> int:
    """Run the demo sweeps and the all-reduce benchmark (resuming), then summarise and report."""
    seconds: dict[str, float] = {}
    data_before = data_memo.seconds_loading()
    code = sweep.run_sweep(DEMO_PRESET, extra, seconds)
    data_seconds = data_memo.seconds_loading() - data_before
    results_dir = Path(sweep.composite_results_dir(DEMO_PRESET, extra))
    started = time.perf_counter()
    code = max(code, measure_allreduce(results_dir, hardware_tag(extra)))
    seconds["all-reduce benchmark"] = time.perf_counter() - started
    print()
    print(summary_tables(results_dir))
    from dpsuite.analysis.report.build import build_report

    started = time.perf_counter()
    written = build_report(results_dir, REPORTS_DIR / results_dir.name)
    seconds["report"] = time.perf_counter() - started
    for warning in written.warnings:
        print(f"dpsuite: warning: {warning}", file=sys.stderr)
    print("\nIn short:")
    for sentence in written.headline:
        print(f"* {sentence.replace('`', '')}")
    print(f"\nreport written to {written.out / 'index.html'} (and index.md, summary.csv)")
    print(f"\n{time_table(seconds, data_seconds)}")
    return code


def time_table(seconds: dict[str, float], data_seconds: float) -> str:
    """Wall seconds by phase; the sweeps' time spent generating or reading data shown apart."""
    rows = [
        (f"sweep {name}" if name.startswith(DEMO_PRESET) else name, s)
        for name, s in seconds.items()
    ]
    data_label = "(data generated or read, inside the sweeps)"
    width = max(len(name) for name, _ in [*rows, (data_label, 0.0)])
    lines = ["where the time went (wall seconds):"]
    lines += [f"  {name:<{width}}  {s:6.1f}" for name, s in rows]
    lines.append(f"  {data_label:<{width}}  {data_seconds:6.1f}")
    lines.append(f"  {'total':<{width}}  {sum(seconds.values()):6.1f}")
    return "\n".join(lines)


def hardware_tag(overrides: list[str]) -> str | None:
    """The `hardware.tag=NAME` given to the demo, for the benchmark's results too."""
    for o in overrides:
        key, _, value = o.partition("=")
        if key.lstrip("+") == "hardware.tag" and value not in ("", "null"):
            return value
    return None


def measure_allreduce(results_dir: Path, tag: str | None) -> int:
    """`dpsuite comm-bench` with the preset's settings, unless the demo measured it before."""
    from dpsuite.measure import comm_bench

    if any((results_dir / "comm_bench").glob(f"*/{results.COMM_BENCH_JSON}")):
        return 0
    file = resources.files(preflight.CONFIG_MODULE).joinpath(
        sweep.PRESET_GROUP, f"{DEMO_PRESET}.yaml"
    )
    settings = OmegaConf.create(file.read_text()).comm_bench
    print(f"\nall-reduce benchmark: {settings.workers} ranks, {settings.sizes}")
    spec = comm_bench.resolve(
        workers=settings.workers,
        sizes=str(settings.sizes),
        factor=settings.factor,
        dtype="fp32",
        warmup=settings.warmup,
        iters=settings.iters,
        backend="auto",
        results_dir=str(results_dir),
        tag=tag,
    )
    return comm_bench.run(spec)


def _pct(x: object) -> str:
    return f"{100 * x:.1f}" if isinstance(x, float) and math.isfinite(x) else "-"


def summary_tables(results_dir: Path) -> str:
    """Throughput by workload x workers, and final accuracy (%) by LR rule x global batch."""
    frame = results.load(results_dir) if results_dir.is_dir() else pd.DataFrame()
    if frame.empty:
        return f"no results in {results_dir}"
    out = []
    ddp = frame[(frame["mode"] == "ddp") & (frame["status"] == "complete")]
    if not ddp.empty:
        table = ddp.pivot_table(
            index=["workload", "per_worker_batch"],
            columns="workers",
            values="samples_per_s",
            aggfunc="median",
        )
        out += [
            "samples/s (median over repeats) by workload and per-worker batch (rows) x workers "
            "(columns):",
            table.round(0).to_string(),
        ]
    sim = frame[frame["mode"] == "simulated"]
    if not sim.empty:
        acc = sim.assign(
            acc=[
                _pct(a) if s == "complete" else s
                for a, s in zip(sim["final_eval_acc"], sim["status"], strict=True)
            ]
        )
        table = acc.pivot_table(
            index="lr_rule", columns="global_batch", values="acc", aggfunc="first"
        ).fillna("")
        out += ["", "final eval accuracy % by LR rule (rows) x global batch (columns):"]
        out.append(table.to_string())
    return "\n".join(out)
