"""`dpsuite` command line: parse the command and hand off. Config lives in Hydra, not here."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from suite.errors import UserError

USAGE = """usage: dpsuite COMMAND [ARGS...]

commands:
  run [-m] [OVERRIDES...]   one run, or with -m a Hydra multirun sweep
                            e.g. dpsuite run workload=mnist1d_mlp workers=2 lr_rule=linear_warmup
  sweep NAME [OVERRIDES...] a sweep preset from suite/conf/sweep/NAME.yaml (scaling, convergence,
                            demo, ...); rerunning it resumes: complete runs are skipped
  demo                      a small scaling + convergence sweep on this machine, then its report
  --help                    this text; `dpsuite run --help` shows the config and its groups
"""
MULTIRUN_FLAGS = ("-m", "--multirun")
EXIT_BAD_INPUT = 2


def _run(args: list[str]) -> int:
    from suite import hydra_app, preflight, progress, sweep

    multirun = any(a in MULTIRUN_FLAGS for a in args)
    if any(a.startswith("-") and a not in MULTIRUN_FLAGS for a in args):
        # Hydra's own flags (--help, --cfg, ...) are passed through unchecked.
        hydra_app.run_hydra(args)
        return 0
    overrides = [a for a in args if a not in MULTIRUN_FLAGS]
    if multirun:
        return sweep.run_sweep(None, overrides)
    preflight.check_overrides(overrides, multirun=False)
    hydra_app.OUTCOMES.clear()
    with progress.activated(progress.for_terminal()):
        hydra_app.run_hydra(overrides)
    statuses = [s for _, s in hydra_app.OUTCOMES]
    return 1 if any(s in ("failed", "invalid") for s in statuses) else 0


def _sweep(args: list[str]) -> int:
    from suite import sweep

    if not args or args[0].startswith("-"):
        names = ", ".join(sweep.preset_names())
        raise UserError(f"usage: dpsuite sweep NAME [OVERRIDES...] (NAME: {names})")
    return sweep.run_sweep(args[0], args[1:])


def _demo(args: list[str]) -> int:
    from suite.demo import run_demo

    return run_demo(args)


COMMANDS = {"run": _run, "sweep": _sweep, "demo": _demo}


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
