"""`dpsuite` command line: parse the command and hand off. Config lives in Hydra, not here."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence

from suite.errors import CommandAborted, Terminated, UserError, raise_terminated

USAGE = """usage: dpsuite COMMAND [ARGS...]

commands:
  run [-m] [OVERRIDES...]   one run, or with -m a Hydra multirun sweep
                            e.g. dpsuite run workload=mnist1d_mlp workers=2 lr_rule=linear_warmup
  report RESULTS_DIR [--out DIR]
                            plots, findings and tables of a results tree (HTML + Markdown + PNG
                            + CSV); default output: reports/<name of RESULTS_DIR>
  compare DIR [DIR...] [--out DIR]
                            several results trees side by side, grouped by machine
  comm-bench [OPTIONS]      collective microbenchmark (size, time, algbw, busbw, correctness)
                            e.g. dpsuite comm-bench --workers 2 -b 1K -e 64M --collective all
  sweep NAME [OVERRIDES...] a sweep preset from suite/conf/sweep/NAME.yaml (scaling, convergence,
                            demo, ...); rerunning it resumes: complete runs are skipped
  demo                      a small scaling + convergence sweep on this machine, then its report
  predict [RESULTS_DIR]     fit the scaling model and predict up to thousands of workers
  --help                    this text; `dpsuite run --help` shows the config and its groups
"""
MULTIRUN_FLAGS = ("-m", "--multirun")
EXIT_BAD_INPUT = 2


def _run(args: list[str]) -> int:
    import shlex

    from suite import progress
    from suite.conf import compose as preflight
    from suite.results import lock as results_lock
    from suite.results import read_status
    from suite.sweep import hydra_app
    from suite.sweep import runner as sweep

    multirun = any(a in MULTIRUN_FLAGS for a in args)
    if any(a.startswith("-") and a not in MULTIRUN_FLAGS for a in args):
        # Hydra's own flags (--help, --cfg, ...) are passed through unchecked.
        hydra_app.run_hydra(args)
        return 0
    overrides = [a for a in args if a not in MULTIRUN_FLAGS]
    if multirun:
        return sweep.run_sweep(None, overrides)
    [spec] = preflight.plan(overrides, multirun=False).specs
    command = shlex.join(["dpsuite", "run", *overrides])
    lock = results_lock.for_launcher([spec.cfg.results_dir], command)
    with lock, progress.activated(progress.for_terminal()) as reporter:
        hydra_app.run_hydra(overrides)
        if not _leads():
            return 0  # another rank writes the run's results (a failing rank exits on its own)
        status = read_status(spec.run_dir) or "not run"  # the run's own record says how it ended
        reporter.run_finished(spec.run_id, status)
    return 0 if status in ("complete", "diverged") else 1


def _leads() -> bool:
    """This process writes the run's results (it is not a rank > 0 of torchrun or srun)."""
    from suite.engine.distributed import ranks_from_env

    ranks = ranks_from_env()
    return ranks is None or ranks.rank == 0


def _sweep(args: list[str]) -> int:
    from suite.sweep import runner as sweep

    if not args or args[0].startswith("-"):
        names = ", ".join(sweep.preset_names())
        raise UserError(f"usage: dpsuite sweep NAME [OVERRIDES...] (NAME: {names})")
    return sweep.run_sweep(args[0], args[1:])


def _predict(args: list[str]) -> int:
    from pathlib import Path

    import pandas as pd

    from suite import results
    from suite.analysis import scaling_model as predict

    parser = ArgParser(
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
        fit = predict.Fit("profile", "by hand", model, validation=pd.DataFrame())
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


def _comm_bench(args: list[str]) -> int:
    from suite.engine.distributed import ranks_from_env
    from suite.measure import comm_bench

    p = ArgParser(
        prog="dpsuite comm-bench",
        description="Collective microbenchmark (nccl-tests definitions): time, algbw = S/t and "
        "busbw = algbw x the collective's factor per message size, with a correctness check. "
        "Writes RESULTS_DIR/comm_bench/<bench_id>/comm_bench.{csv,json}.",
    )
    p.add_argument("--workers", type=int, default=2, help="ranks on this host (default 2)")
    p.add_argument(
        "--collective",
        default=comm_bench.DEFAULT_COLLECTIVE,
        help="all_reduce, all_gather, reduce_scatter, broadcast, all_to_all, a comma list of "
        "them, or all (default all_reduce)",
    )
    p.add_argument(
        "--sizes",
        help="a range LO:HI stepped by --factor, or a list 1K,1M,64M (default 1K:256M)",
    )
    p.add_argument("-b", "--minbytes", help="smallest size of the range (as nccl-tests)")
    p.add_argument("-e", "--maxbytes", help="largest size of the range (as nccl-tests)")
    p.add_argument(
        "-f", "--factor", "--stepfactor", type=int, default=2, help="range step (default 2)"
    )
    p.add_argument("--dtype", default="fp32", help="fp32 or bf16 (default fp32)")
    p.add_argument(
        "-w", "--warmup", "--warmup_iters", type=int, default=5, help="untimed runs per size"
    )
    p.add_argument("-n", "--iters", type=int, default=20, help="timed runs per size")
    p.add_argument("--backend", default="auto", help="auto (nccl on CUDA, else gloo), gloo, nccl")
    p.add_argument("--results-dir", default="results", help="where comm_bench/ goes")
    p.add_argument("--tag", default=None, help="your name for this machine")
    a = p.parse_args(args)
    joined = ranks_from_env()
    spec = comm_bench.resolve(
        a.workers,
        comm_bench.sizes_text(a.sizes, a.minbytes, a.maxbytes),
        a.factor,
        a.dtype,
        a.warmup,
        a.iters,
        a.backend,
        a.results_dir,
        a.tag,
        world_size=joined.world_size if joined else None,
        local_world_size=joined.local_world_size if joined else None,
        collectives=a.collective,
        local_rank=joined.local_rank if joined else None,
    )
    return comm_bench.run(spec)


def _demo(args: list[str]) -> int:
    from suite.sweep.demo import run_demo

    return run_demo(args)


def _export(args: list[str]) -> int:
    from suite.cli.export import export

    return export(args)


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
    from suite.analysis.report.build import build_report

    _print_written(build_report(ns.results_dir, ns.out))
    return 0


def _compare(args: list[str]) -> int:
    parser = ArgParser(prog="dpsuite compare", description="Results trees side by side.")
    parser.add_argument("dirs", nargs="+", metavar="DIR", help="results directories")
    parser.add_argument("--out", help="output directory (default: reports/compare-A-vs-B)")
    ns = parser.parse_args(args)
    from suite.analysis.report.compare import build_compare

    _print_written(build_compare(ns.dirs, ns.out))
    return 0


COMMANDS = {
    "run": _run,
    "sweep": _sweep,
    "report": _report,
    "compare": _compare,
    "predict": _predict,
    "comm-bench": _comm_bench,
    "demo": _demo,
    "export": _export,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, raise_terminated) if in_main_thread else None
    try:
        return _dispatch(args)
    finally:
        if in_main_thread:  # leave the embedding process (e.g. a test runner) as it was
            signal.signal(signal.SIGTERM, previous)


def _dispatch(args: list[str]) -> int:
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
    except (UserError, CommandAborted) as exc:
        print(f"dpsuite: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt as exc:
        terminated = isinstance(exc, Terminated)
        print(f"dpsuite: {'terminated' if terminated else 'interrupted'}", file=sys.stderr)
        return 143 if terminated else 130


if __name__ == "__main__":
    sys.exit(main())
