"""`dpsuite demo`: the first thing to run on a new machine.

It runs the `demo` sweep preset (a small scaling sweep with real worker processes, then a small
convergence sweep with simulated workers), prints what it found, and builds the report.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pandas as pd

from suite import results
from suite.sweep import runner as sweep

DEMO_PRESET = "demo"
REPORTS_DIR = Path("reports")


def run_demo(extra: list[str]) -> int:
    """Run the demo sweeps (resuming if they ran before), then summarise and report."""
    code = sweep.run_sweep(DEMO_PRESET, extra)
    results_dir = Path(sweep.composite_results_dir(DEMO_PRESET, extra))
    print()
    print(summary_tables(results_dir))
    from suite.analysis.report.build import build_report

    written = build_report(results_dir, REPORTS_DIR / results_dir.name)
    for warning in written.warnings:
        print(f"dpsuite: warning: {warning}", file=sys.stderr)
    print(f"\nreport written to {written.out / 'index.html'} (and index.md, summary.csv)")
    return code


def _pct(x: object) -> str:
    return f"{100 * x:.1f}" if isinstance(x, float) and math.isfinite(x) else "-"


def summary_tables(results_dir: Path) -> str:
    """Throughput by workers x batch, and final accuracy (%) by LR rule x global batch."""
    frame = results.load(results_dir) if results_dir.is_dir() else pd.DataFrame()
    if frame.empty:
        return f"no results in {results_dir}"
    out = []
    ddp = frame[(frame["mode"] == "ddp") & (frame["status"] == "complete")]
    if not ddp.empty:
        table = ddp.pivot_table(
            index="workers", columns="per_worker_batch", values="samples_per_s", aggfunc="median"
        )
        out += [
            "samples/s by workers (rows) x per-worker batch (columns):",
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
        )
        out += ["", "final eval accuracy % by LR rule (rows) x global batch (columns):"]
        out.append(table.to_string())
    return "\n".join(out)
