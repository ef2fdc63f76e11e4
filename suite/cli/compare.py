"""`dpsuite compare A B [DIR ...]`: its flags, each value checked into one clear error, the
hand-off to the comparison report, and the regression gate's exit status."""

from __future__ import annotations

import argparse
import os
import sys

from dpsuite.analysis.report import compare
from dpsuite.analysis.report.compare import MAX_SPREAD
from dpsuite.cli.args import ArgParser, finite
from dpsuite.cli.report import print_written
from dpsuite.errors import UserError
from dpsuite.results import reference

EXIT_REGRESSED = 1  # --fail-below: a ratio below the gate
EXIT_TOO_NOISY = 3  # --fail-below: a ratio below the gate whose interval is too wide


def parser() -> ArgParser:
    p = ArgParser(
        prog="dpsuite compare",
        description="Results trees side by side, in pairs of a baseline A and a candidate B: "
        "machines by default (the first directory's is the baseline; a tree of several "
        "machines is paired machine by machine), or the values of --by on each machine. "
        "Throughput of each configuration run on both sides is compared as B / A.",
    )
    p.add_argument("dirs", nargs="*", metavar="DIR", help="results directories")
    p.add_argument(
        "--reference",
        action="store_true",
        help="compare with the reference results that come with dpsuite, as the baseline A "
        f"(the first directory; {reference.ENV}=DIR reads another results tree instead)",
    )
    p.add_argument(
        "--by",
        metavar="SETTING",
        help="compare the runs of each machine by this setting instead of by machine: a "
        "hardware field (hardware.torch), a run setting (backend, threads_per_worker), any "
        "config key (config.precision), or dir (the directory given); its value in the first "
        "directory is the baseline (default: by machine, or the one setting that differs "
        "when every run is on one machine)",
    )
    p.add_argument("--out", help="output directory (default: reports/compare-A-vs-B)")
    p.add_argument(
        "--fail-below",
        type=finite,
        metavar="RATIO",
        help="exit 1 when a configuration's B / A throughput is below RATIO (e.g. 0.95), its "
        "whole 95 %% interval when repeats give one",
    )
    p.add_argument(
        "--max-spread",
        type=finite,
        default=MAX_SPREAD,
        metavar="FACTOR",
        help="an interval whose ends are more than FACTOR apart (high / low) is too noisy to "
        f"call a regression on: exit {EXIT_TOO_NOISY} instead of 1 (default {MAX_SPREAD:g})",
    )
    p.add_argument(
        "--allow-noisy",
        action="store_true",
        help="call a regression on an interval however wide (--fail-below alone decides)",
    )
    return p


def run(args: list[str]) -> int:
    """`dpsuite compare ARGS`: the exit status (0, or the gate's when --fail-below is given)."""
    parsed = parser().parse_args(args)
    _check(parsed)
    dirs = parsed.dirs
    if parsed.reference:
        cache = os.environ.get("DPSUITE_CACHE_DIR", "~/.cache/dpsuite")
        dirs = [str(reference.reference_dir(cache)), *dirs]
    compared = compare.build_compare(
        dirs,
        parsed.out,
        parsed.fail_below,
        max_spread=parsed.max_spread,
        allow_noisy=parsed.allow_noisy,
        by=parsed.by,
    )
    if len(compared.ratios):
        print(f"throughput B / A per configuration ({compare.pair_names(compared.ratios)}):")
        print(compare.ratio_lines(compared.ratios))
        print()
    for line in compare.pairing_lines(compared.pairing):
        print(line)
    print_written(compared)
    if parsed.fail_below is None:
        return 0
    return _gate(compared, parsed.fail_below, parsed.max_spread)


def _check(parsed: argparse.Namespace) -> None:
    if not parsed.dirs and not parsed.reference:
        raise UserError("compare needs a results directory (DIR ..., or --reference DIR)")
    if parsed.fail_below is not None and not parsed.fail_below > 0:
        raise UserError(f"--fail-below must be a ratio > 0, got {parsed.fail_below}")
    if not parsed.max_spread > 1:
        raise UserError(f"--max-spread must be a factor > 1, got {parsed.max_spread:g}")


def _gate(compared: compare.Compared, fail_below: float, max_spread: float) -> int:
    """--fail-below's verdict: each regression and each ratio too noisy to call, on stderr."""
    if compared.ratios.empty:
        raise UserError(
            "--fail-below: no configuration was run with real workers on both sides of a pair, "
            "so there is no throughput to gate"
        )
    described = compared.described
    for line in compare.regression_lines(
        compared.regressed, compared.ratios, fail_below, described
    ):
        print(f"dpsuite: regression: {line}", file=sys.stderr)
    for line in compare.noisy_lines(compared.noisy, compared.ratios, max_spread, described):
        print(
            f"dpsuite: too noisy to call: {line}: rerun, or --allow-noisy to gate on it",
            file=sys.stderr,
        )
    for line in compare.gate_lines(compared, fail_below):
        print(f"dpsuite: gate: {line}", file=sys.stderr)
    if len(compared.regressed):
        return EXIT_REGRESSED
    return EXIT_TOO_NOISY if len(compared.noisy) else 0
