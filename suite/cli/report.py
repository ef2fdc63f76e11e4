"""`dpsuite report RESULTS_DIR`: one results tree's report, and how a written report is told."""

from __future__ import annotations

import sys

from dpsuite.cli.args import ArgParser


def parser() -> ArgParser:
    p = ArgParser(prog="dpsuite report", description="Report of one results tree.")
    p.add_argument("results_dir", help="a results directory (any depth of run folders)")
    p.add_argument("--out", help="output directory (default: reports/<name of RESULTS_DIR>)")
    return p


def run(args: list[str]) -> int:
    """`dpsuite report ARGS`: the exit status."""
    parsed = parser().parse_args(args)
    from dpsuite.analysis.report.build import build_report

    print_written(build_report(parsed.results_dir, parsed.out))
    return 0


def print_written(written) -> None:
    """A written report's warnings (on stderr), then where it is."""
    for warning in written.warnings:
        print(f"dpsuite: warning: {warning}", file=sys.stderr)
    print(f"report written to {written.out / 'index.html'} (and index.md, summary.csv)")
