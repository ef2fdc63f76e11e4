"""`dpsuite` command line: parse the command and hand off. Config lives in Hydra, not here."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Sequence

from suite.errors import UserError

USAGE = """usage: dpsuite COMMAND [ARGS...]

commands:
  run [-m] [OVERRIDES...]   one run, or with -m a Hydra multirun sweep
                            e.g. dpsuite run workload=mnist1d_mlp workers=2 lr_rule=linear_warmup
  sweep NAME [OVERRIDES...] a sweep preset from suite/conf/sweep/NAME.yaml (scaling, convergence,
                            demo, ...); rerunning it resumes: complete runs are skipped
  demo                      a small scaling + convergence sweep on this machine, then its report
  predict [RESULTS_DIR]     fit the scaling model and predict up to thousands of workers
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


def _predict(args: list[str]) -> int:
    import argparse
    from pathlib import Path

    from suite import predict, results

    parser = argparse.ArgumentParser(
        prog="dpsuite predict",
        description="Fit the scaling model to measured results (or take a hardware profile by "
        "hand) and predict step time, throughput and efficiency up to --max-workers.",
    )
    parser.add_argument("results_dir", nargs="?", help="results tree with runs and comm-bench")
    parser.add_argument("--batch", type=int, default=32, help="per-worker batch to predict at")
    parser.add_argument("--max-workers", type=int, default=4096)
    parser.add_argument("--out", help="write predictions.csv, validation.csv, models.csv here")
    hand = parser.add_argument_group("hardware profile by hand (instead of results_dir)")
    hand.add_argument("--params", type=float, help="model parameters")
    hand.add_argument("--flops-per-sample", type=float, help="default: 6 x params")
    hand.add_argument("--tflops", type=float, help="accelerator peak TFLOP/s")
    hand.add_argument("--mfu", type=float, default=0.4, help="fraction of peak achieved")
    hand.add_argument("--link-gbps", type=float, help="per-rank link bandwidth, Gbit/s")
    hand.add_argument("--latency-us", type=float, default=5.0, help="per-hop latency, us")
    a = parser.parse_args(args)
    if a.batch < 1 or a.max_workers < 1:
        raise UserError("--batch and --max-workers must be >= 1")
    workers = [w for w in predict.DEFAULT_WORKERS if w <= a.max_workers]
    if a.results_dir is None:
        if None in (a.params, a.tflops, a.link_gbps):
            raise UserError("give a results directory, or --params, --tflops and --link-gbps")
        if min(a.params, a.tflops, a.link_gbps, a.mfu) <= 0 or a.latency_us < 0:
            raise UserError("profile values must be positive")
        model = predict.from_profile(
            a.params, a.flops_per_sample, a.tflops, a.mfu, a.link_gbps, a.latency_us
        )
        fit = predict.Fit("profile", "by hand", model, pd_empty())
        print(predict.format_fit(fit, a.batch, workers))
        if a.out:
            predict.write_fits([fit], a.out, a.batch, workers)
        return 0
    if not Path(a.results_dir).is_dir():
        raise UserError(f"results directory not found: {a.results_dir}")
    runs, bench = results.load(a.results_dir), results.load_comm_bench(a.results_dir)
    fits, skipped = predict.fit_all(runs, bench)
    for reason in skipped:
        print(f"skipped {reason}", file=sys.stderr)
    if not fits:
        raise UserError(
            f"nothing to fit in {a.results_dir}: need workers=1 runs and comm-bench results "
            "of the same machine"
        )
    for fit in fits:
        print(predict.format_fit(fit, a.batch, workers))
    if a.out:
        predict.write_fits(fits, a.out, a.batch, workers)
        print(f"wrote {a.out}/predictions.csv, validation.csv, models.csv")
    return 0


def pd_empty():
    import pandas as pd

    return pd.DataFrame()


def _demo(args: list[str]) -> int:
    from suite.demo import run_demo

    return run_demo(args)


COMMANDS = {"run": _run, "sweep": _sweep, "demo": _demo, "predict": _predict}


class Terminated(KeyboardInterrupt):
    """SIGTERM, turned into an exception so that workers are stopped and results marked."""


def _on_sigterm(signum, frame) -> None:
    raise Terminated()


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_sigterm)
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
    except KeyboardInterrupt as exc:
        terminated = isinstance(exc, Terminated)
        print(f"dpsuite: {'terminated' if terminated else 'interrupted'}", file=sys.stderr)
        return 143 if terminated else 130


if __name__ == "__main__":
    sys.exit(main())
