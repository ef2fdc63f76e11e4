"""`dpsuite` command line: parse the command and hand off. Config lives in Hydra, not here."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from suite.errors import UserError

USAGE = """usage: dpsuite COMMAND [ARGS...]

commands:
  run [-m] [OVERRIDES...]   one run, or with -m a Hydra multirun sweep
                            e.g. dpsuite run workload=mnist1d_mlp workers=2 lr_rule=linear_warmup
  report RESULTS_DIR [--out DIR]
                            plots, findings and tables of a results tree (HTML + Markdown + PNG
                            + CSV); default output: reports/<name of RESULTS_DIR>
  compare DIR [DIR...] [--out DIR]
                            several results trees side by side, grouped by machine
  demo                      a small run on this machine, with its summary
  --help                    this text; `dpsuite run --help` shows the config and its groups
"""
MULTIRUN_FLAGS = ("-m", "--multirun")
EXIT_BAD_INPUT = 2


def _run(args: list[str]) -> int:
    from suite import hydra_app, preflight

    multirun = any(a in MULTIRUN_FLAGS for a in args)
    if not any(a.startswith("-") and a not in MULTIRUN_FLAGS for a in args):
        # Hydra's own flags (--help, --cfg, ...) are passed through unchecked.
        preflight.check_overrides([a for a in args if not a.startswith("-")], multirun)
    hydra_app.OUTCOMES.clear()
    argv, sys.argv = sys.argv, ["dpsuite", *args]
    try:
        hydra_app.hydra_main()
    finally:
        sys.argv = argv
    statuses = [s for _, s in hydra_app.OUTCOMES]
    if multirun and statuses:
        counts = {s: statuses.count(s) for s in sorted(set(statuses))}
        print("sweep finished: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
    return 1 if any(s in ("failed", "invalid") for s in statuses) else 0


def _demo(args: list[str]) -> int:
    from suite.demo import run_demo

    return run_demo(args)


class ArgParser(argparse.ArgumentParser):
    """argparse for the non-Hydra commands; a usage error is one line, like every bad input."""

    def error(self, message: str):
        raise UserError(f"{self.prog}: {message} (see --help)")


def _print_written(written) -> None:
    for warning in written.warnings:
        print(f"dpsuite: warning: {warning}", file=sys.stderr)
    print(f"report written to {written.out / 'index.html'} (and index.md, summary.csv)")


def _report(args: list[str]) -> int:
    parser = ArgParser(prog="dpsuite report", description="Report of one results tree.")
    parser.add_argument("results_dir", help="a results directory (any depth of run folders)")
    parser.add_argument("--out", help="output directory (default: reports/<name of RESULTS_DIR>)")
    ns = parser.parse_args(args)
    from suite.report.build import build_report

    _print_written(build_report(ns.results_dir, ns.out))
    return 0


def _compare(args: list[str]) -> int:
    parser = ArgParser(prog="dpsuite compare", description="Results trees side by side.")
    parser.add_argument("dirs", nargs="+", metavar="DIR", help="results directories")
    parser.add_argument("--out", help="output directory (default: reports/compare-A-vs-B)")
    ns = parser.parse_args(args)
    from suite.report.compare import build_compare

    _print_written(build_compare(ns.dirs, ns.out))
    return 0


COMMANDS = {"run": _run, "report": _report, "compare": _compare, "demo": _demo}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if args else EXIT_BAD_INPUT
    command, rest = args[0], args[1:]
    if command not in COMMANDS:
        print(
            f"dpsuite: error: unknown command '{command}' (choose from: {', '.join(COMMANDS)})",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    try:
        return COMMANDS[command](rest)
    except UserError as exc:
        print(f"dpsuite: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("dpsuite: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
