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
  comm-bench [OPTIONS]      all-reduce microbenchmark (size, time, algbw, busbw, correctness)
                            e.g. dpsuite comm-bench --workers 2 --sizes 1K:64M --dtype fp32
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


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad input as one UserError line instead of usage + exit."""

    def error(self, message: str):  # type: ignore[override]
        raise UserError(message)


def _comm_bench(args: list[str]) -> int:
    from suite import comm_bench
    from suite.distributed import ranks_from_env

    p = _Parser(
        prog="dpsuite comm-bench",
        description="All-reduce microbenchmark (nccl-tests all_reduce_perf definitions): "
        "time, algbw = S/t and busbw = algbw*2(n-1)/n per message size, with a correctness "
        "check. Writes RESULTS_DIR/comm_bench/<bench_id>/comm_bench.{csv,json}.",
    )
    p.add_argument("--workers", type=int, default=2, help="ranks on this host (default 2)")
    p.add_argument(
        "--sizes",
        default=comm_bench.DEFAULT_SIZES,
        help="a range LO:HI stepped by --factor, or a list 1K,1M,64M (default 1K:256M)",
    )
    p.add_argument("--factor", type=int, default=2, help="range step factor (default 2)")
    p.add_argument("--dtype", default="fp32", help="fp32 or bf16 (default fp32)")
    p.add_argument("--warmup", type=int, default=5, help="untimed all-reduces per size")
    p.add_argument("--iters", type=int, default=20, help="timed all-reduces per size")
    p.add_argument("--backend", default="auto", help="auto (nccl on CUDA, else gloo), gloo, nccl")
    p.add_argument("--results-dir", default="results", help="where comm_bench/ goes")
    p.add_argument("--tag", default=None, help="your name for this machine")
    a = p.parse_args(args)
    joined = ranks_from_env()
    spec = comm_bench.resolve(
        a.workers,
        a.sizes,
        a.factor,
        a.dtype,
        a.warmup,
        a.iters,
        a.backend,
        a.results_dir,
        a.tag,
        world_size=joined.world_size if joined else None,
        local_world_size=joined.local_world_size if joined else None,
    )
    return comm_bench.run(spec)


def _demo(args: list[str]) -> int:
    from suite.demo import run_demo

    return run_demo(args)


COMMANDS = {"run": _run, "comm-bench": _comm_bench, "demo": _demo}


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
