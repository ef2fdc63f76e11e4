"""`dpsuite` command line: parse the command and hand off. Config lives in Hydra, not here."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dpsuite.cli import closed_stdout
from dpsuite.cli.args import ArgParser
from dpsuite.errors import CommandAborted, Terminated, UserError, did_you_mean, raise_terminated

MULTIRUN_FLAGS = ("-m", "--multirun")
HELP_FLAGS = {"-h", "--help"}
DRY_RUN = "--dry-run"
STATUS = "--status"
COMPLETION_FLAG = "-sc"  # Hydra's spelling, which its completion script calls
EXIT_BAD_INPUT = 2


def _run(args: list[str]) -> int:
    overrides = [a for a in args if not a.startswith("-")]
    if HELP_FLAGS & set(args):
        from dpsuite.cli.help import run_help

        print(run_help(overrides))
        return 0
    if DRY_RUN in args:
        from dpsuite.cli.help import dry_run

        print(dry_run(None, overrides))
        return 0
    for flag in (COMPLETION_FLAG, "--shell-completion"):  # Hydra's `run -sc install=bash`
        if flag in args:
            return _completion(args[args.index(flag) + 1 :])
    return _run_overrides(args)


def _run_overrides(args: list[str]) -> int:
    import shlex

    from dpsuite import progress
    from dpsuite.conf import compose as preflight
    from dpsuite.engine.launch import read_record
    from dpsuite.results import lock as results_lock
    from dpsuite.results import read_status
    from dpsuite.sweep import hydra_app
    from dpsuite.sweep import runner as sweep
    from dpsuite.sweep.measured import final_detail

    multirun = any(a in MULTIRUN_FLAGS for a in args)
    from dpsuite.cli import hydra_flags

    shown = hydra_flags.parse(args)  # Hydra's own flags: checked like a run, or refused
    if shown is not None:
        print(hydra_flags.show(shown))
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
        record = read_record(spec.run_dir) or {}
        reporter.run_finished(spec.run_id, status, final_detail(record))
    return 0 if status in ("complete", "diverged") else 1


def _leads() -> bool:
    """This process writes the run's results (it is not a rank > 0 of torchrun or srun)."""
    from dpsuite.runtime.ranks import ranks_from_env

    ranks = ranks_from_env()
    return ranks is None or ranks.rank == 0


def _sweep(args: list[str]) -> int:
    from dpsuite.cli import help

    if not args or args[0] in HELP_FLAGS:
        print(help.sweep_list())
        return 0 if args else EXIT_BAD_INPUT
    if args[0] == STATUS:
        return _sweep_status(args[1:])
    name, rest = args[0], args[1:]
    from dpsuite.cli import hydra_flags

    if hydra_flags.requested(rest) and not HELP_FLAGS & set(rest):
        shown = hydra_flags.parse(rest)  # --cfg job: checked like the sweep, then shown
        assert shown is not None
        print(hydra_flags.show_preset(name, shown))
        return 0
    overrides = [a for a in rest if not a.startswith("-")]
    unknown = [a for a in rest if a.startswith("-") and a not in HELP_FLAGS | {DRY_RUN}]
    if unknown:
        raise UserError(f"dpsuite sweep: unknown option {unknown[0]} (see dpsuite sweep --help)")
    if HELP_FLAGS & set(rest):
        print(help.preset_help(name, overrides))
        return 0
    if DRY_RUN in rest:
        print(help.dry_run(name, overrides))
        return 0
    from dpsuite.sweep import runner as sweep

    return sweep.run_sweep(name, overrides)


def _comm_bench(args: list[str]) -> int:
    from dpsuite.measure import comm_bench
    from dpsuite.runtime.ranks import ranks_from_env

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


def _input_bench(args: list[str]) -> int:
    p = ArgParser(
        prog="dpsuite input-bench",
        description="Samples/s of a workload's training input pipeline alone (the engine's "
        "DataLoader per rank with its DistributedSampler share and data.loader_* settings; for "
        "in-memory tensors the index gather), over data.loader_workers=0,1,2 and ranks=1,2 "
        "(processes reading their shares at once, started as a DDP run starts its workers). "
        "Other KEY=VALUE overrides are the run's (workload=..., batch.per_worker=...). Writes "
        "RESULTS_DIR/input_bench/<bench_id>/input_bench.{csv,json}.",
    )
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    p.add_argument("--batches", type=int, default=50, help="timed batches per rank (default 50)")
    p.add_argument("--warmup", type=int, default=5, help="untimed batches after the first")
    p.add_argument("--tag", default=None, help="your name for this machine")
    a = p.parse_args(args)
    from dpsuite.engine import input_bench

    return input_bench.run(input_bench.resolve(a.overrides, a.batches, a.warmup, a.tag))


def _demo(args: list[str]) -> int:
    from dpsuite.cli import help
    from dpsuite.sweep.demo import run_demo

    if HELP_FLAGS & set(args):
        print("usage: dpsuite demo [KEY=VALUE ...] [--dry-run]\n")
        print(help.preset_help("demo", [a for a in args if not a.startswith("-")]))
        print("\nThen a short all-reduce benchmark and the report (reports/demo/index.html).")
        return 0
    if DRY_RUN in args:
        print(help.dry_run("demo", [a for a in args if not a.startswith("-")]))
        return 0
    return run_demo(args)


def _export(args: list[str]) -> int:
    from dpsuite.cli.export import export

    return export(args)


def _sbatch(args: list[str]) -> int:
    from dpsuite.cli import sbatch

    return sbatch.run(args)


def _sweep_status(args: list[str]) -> int:
    from pathlib import Path

    from dpsuite.sweep import detached

    if len(args) != 1:
        raise UserError("sweep --status: give one RESULTS_DIR")
    print("\n".join(detached.status_lines(Path(args[0]))))
    return 0


def _report(args: list[str]) -> int:
    from dpsuite.cli import report

    return report.run(args)


def _compare(args: list[str]) -> int:
    from dpsuite.cli import compare

    return compare.run(args)


def _predict(args: list[str]) -> int:
    from dpsuite.cli import predict

    return predict.run(args)


def _schema(args: list[str]) -> int:
    parser = ArgParser(
        prog="dpsuite schema",
        description=(
            "Every key and column of run.json, comm_bench.json and the CSV files: name, unit, "
            "type, range, whether required, and meaning."
        ),
    )
    parser.parse_args(args)
    from dpsuite.results import schema

    print(schema.markdown())
    return 0


def _completion(args: list[str]) -> int:
    from dpsuite.cli import completion

    if len(args) != 1:
        raise UserError(f"{COMPLETION_FLAG} takes one of: {', '.join(completion.ACTIONS)}")
    print(completion.respond(args[0], COMMANDS))
    return 0


@dataclass(frozen=True)
class Command:
    """A `dpsuite` command: what it takes, what it does (for the help) and its handler."""

    name: str
    handler: Callable[[list[str]], int]
    args: str
    summary: str


COMMANDS = {
    c.name: c
    for c in (
        Command(
            "run",
            _run,
            "[-m] [KEY=VALUE ...]",
            "one run, or with -m a Hydra multirun sweep; `dpsuite run --help` lists every "
            "config key with its meaning",
        ),
        Command(
            "sweep",
            _sweep,
            "NAME [KEY=VALUE ...] | --status RESULTS_DIR",
            "a sweep preset (scaling, convergence, demo, ...); rerunning it resumes; "
            "`dpsuite sweep NAME --help` shows its axes, --dry-run its runs",
        ),
        Command(
            "sbatch",
            _sbatch,
            "[--submit] [--out PATH] run|sweep ...",
            "the SLURM batch script of a run or sweep, written out or submitted (detached); "
            "`dpsuite sweep --status RESULTS_DIR` follows it",
        ),
        Command(
            "demo", _demo, "[KEY=VALUE ...]", "a small scaling + convergence sweep, then its report"
        ),
        Command(
            "report",
            _report,
            "RESULTS_DIR [--out DIR]",
            "plots, findings and tables of a results tree (HTML + Markdown + PNG + CSV)",
        ),
        Command(
            "compare",
            _compare,
            "A B [DIR ...] [--fail-below RATIO]",
            "results trees side by side, grouped by machine: throughput B / A per "
            "configuration with its interval; exit 1 below RATIO",
        ),
        Command(
            "comm-bench",
            _comm_bench,
            "[OPTIONS]",
            "collective microbenchmark (size, time, algbw, busbw, correctness), as nccl-tests",
        ),
        Command(
            "input-bench",
            _input_bench,
            "[ranks=1,2] [data.loader_workers=0,1,2] [KEY=VALUE ...]",
            "samples/s of a workload's input pipeline alone, per loader_workers and rank count",
        ),
        Command(
            "predict",
            _predict,
            "[RESULTS_DIR] [--profile NAME]",
            "the scaling model: fitted to a results tree and validated, or a workload planned "
            "on a hardware profile (dgx-h100, ...), up to thousands of workers",
        ),
        Command(
            "export",
            _export,
            "parquet|tensorboard|wandb|mlflow RESULTS_DIR",
            "a results tree as Parquet files, TensorBoard event files, offline W&B runs or "
            "MLflow runs",
        ),
        Command("schema", _schema, "", "every results key and column: unit, type, range, meaning"),
    )
}


def _warning_line(message, category, filename, lineno, line=None) -> str:
    """A warning of the suite's (a results file left out) as one line, like an error."""
    if issubclass(category, UserWarning):
        return f"dpsuite: warning: {message}\n"
    return _python_format(message, category, filename, lineno, line)


_python_format = warnings.formatwarning


def top_parser() -> argparse.ArgumentParser:
    """`dpsuite`'s own parser, generated from COMMANDS: each command parses its own arguments."""
    parser = ArgParser(
        prog="dpsuite",
        description="Benchmark suite for data-parallel training: scaling, communication and "
        "large-batch convergence. Config is Hydra's: KEY=VALUE overrides.",
        epilog="`dpsuite COMMAND --help` for each command. Tab completion (commands, presets, "
        'config keys): eval "$(dpsuite -sc install=bash)"',
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "-V", "--version", action="store_true", help="dpsuite's version (and torch's, python's)"
    )
    parser.add_argument(
        COMPLETION_FLAG,
        "--shell-completion",
        metavar="ACTION=SHELL",
        help="shell completion: install=bash (or zsh) prints the script to eval; "
        "uninstall=bash; query=bash answers the script",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for c in COMMANDS.values():
        commands.add_parser(
            c.name, help=c.summary, add_help=False, usage=f"dpsuite {c.name} {c.args}"
        )
    return parser


STOPPING_SIGNALS = ("SIGTERM", "SIGHUP")  # a scheduler's or `timeout`'s; a closed terminal's


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    in_main_thread = threading.current_thread() is threading.main_thread()
    signums = [getattr(signal, name) for name in STOPPING_SIGNALS if hasattr(signal, name)]
    previous = {s: signal.signal(s, raise_terminated) for s in signums} if in_main_thread else {}
    code = 1
    try:
        with warnings.catch_warnings(), closed_stdout.tolerated() as stdout:
            warnings.formatwarning = _warning_line
            code = _dispatch(args)
    finally:
        for signum, handler in previous.items():  # leave an embedding process as it was
            signal.signal(signum, handler)
    return closed_stdout.EXIT_BROKEN_PIPE if stdout.pipe_closed else code


def _dispatch(args: list[str]) -> int:
    try:
        return _command(args)
    except (UserError, CommandAborted) as exc:
        print(f"dpsuite: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt as exc:
        if not isinstance(exc, Terminated):
            print("dpsuite: interrupted", file=sys.stderr)
            return 130
        name = signal.Signals(exc.signum).name
        print(f"dpsuite: terminated{'' if name == 'SIGTERM' else f' ({name})'}", file=sys.stderr)
        return 128 + exc.signum


def _command(args: list[str]) -> int:
    if not args or args[0] in ("help", *HELP_FLAGS):
        top_parser().print_help()
        return 0 if args else EXIT_BAD_INPUT
    if args[0] in COMMANDS:  # the command's own parser takes everything after its name
        return COMMANDS[args[0]].handler(args[1:])
    if not args[0].startswith("-"):
        raise UserError(
            f"unknown command '{args[0]}'{did_you_mean(args[0], list(COMMANDS))} "
            f"(choose from: {', '.join(COMMANDS)})"
        )
    parsed = top_parser().parse_args(
        args
    )  # top-level options only: the commands were matched above
    if parsed.shell_completion is not None:
        return _completion([parsed.shell_completion])
    if parsed.version:
        from dpsuite.cli.help import version

        print(version())
        return 0
    top_parser().print_help()
    return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
