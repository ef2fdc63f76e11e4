"""`dpsuite sbatch [OPTIONS] run|sweep ...`: the SLURM batch script of a command."""

from __future__ import annotations

import argparse
from pathlib import Path

from dpsuite.cli.args import ArgParser


def parser() -> ArgParser:
    p = ArgParser(
        prog="dpsuite sbatch",
        description="Write the SLURM batch script that runs a dpsuite run or sweep in one job on "
        "one node, or submit it and return at once (--submit). Follow it with `dpsuite sweep "
        "--status RESULTS_DIR`; submit the same command again to resume (complete runs are "
        "skipped).",
    )
    p.add_argument("--out", help="write the script to this file (default: print it)")
    p.add_argument(
        "--submit", action="store_true", help="submit it with sbatch and return (detached)"
    )
    p.add_argument(
        "--time", type=int, default=60, help="the job's time limit in minutes (default 60)"
    )
    p.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="SBATCH_OPTION",
        help="an sbatch option for the script, e.g. --option=--partition=gpu (repeatable)",
    )
    p.add_argument(
        "command", nargs=argparse.REMAINDER, help="run [-m] KEY=VALUE ... | sweep NAME ..."
    )
    return p


def run(args: list[str]) -> int:
    from dpsuite.sweep import detached

    a = parser().parse_args(args)
    command = detached.checked(a.command)
    script = detached.batch_script(command, a.time, a.option)
    if a.out:
        detached.write_script(script, Path(a.out))
        detached.make_results_dir(command)  # SLURM opens the job's log there
        print(f"wrote {a.out}: submit it with `sbatch {a.out}`")
    if a.submit:
        job_id = detached.submit(command, script)
        print(
            f"submitted SLURM job {job_id} ({command.runs} runs into {command.results_dir}); "
            f"follow it with `dpsuite sweep --status {command.results_dir}`"
        )
    elif not a.out:
        print(script, end="")
    return 0
