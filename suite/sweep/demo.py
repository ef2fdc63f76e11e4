"""`dpsuite demo`: the first thing to run on a new machine.

It runs the `demo` sweep preset (a scaling sweep with real worker processes, then a convergence
sweep with simulated workers), measures the all-reduce with `dpsuite comm-bench` (settings under
``comm_bench`` in the preset), prints what it found and the report's headline, and builds the
report. Rerunning it resumes: complete runs and an existing all-reduce benchmark are kept.
"""

from __future__ import annotations

import math
import sys
from importlib import resources
from pathlib import Path

import pandas as pd
from omegaconf import OmegaConf

from suite import results
from suite.conf import compose as preflight
from suite.sweep import runner as sweep

DEMO_PRESET = "demo"
REPORTS_DIR = Path("reports")


def run_demo(extra: list[str]) -> int:
    """Run the demo sweeps and the all-reduce benchmark (resuming), then summarise and report."""
    code = sweep.run_sweep(DEMO_PRESET, extra)
    results_dir = Path(sweep.composite_results_dir(DEMO_PRESET, extra))
    code = max(code, measure_allreduce(results_dir, hardware_tag(extra)))
    print()
    print(summary_tables(results_dir))
    from suite.analysis.report.build import build_report

    written = build_report(results_dir, REPORTS_DIR / results_dir.name)
    for warning in written.warnings:
        print(f"dpsuite: warning: {warning}", file=sys.stderr)
    print("\nIn short:")
    for sentence in written.headline:
        print(f"* {sentence.replace('`', '')}")
    print(f"\nreport written to {written.out / 'index.html'} (and index.md, summary.csv)")
    return code


def hardware_tag(overrides: list[str]) -> str | None:
    """The `hardware.tag=NAME` given to the demo, for the benchmark's results too."""
    for o in overrides:
        key, _, value = o.partition("=")
        if key.lstrip("+") == "hardware.tag" and value not in ("", "null"):
            return value
    return None


def measure_allreduce(results_dir: Path, tag: str | None) -> int:
    """`dpsuite comm-bench` with the preset's settings, unless the demo measured it before."""
    from suite.measure import comm_bench

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
