"""The bounds of `dpsuite predict`'s numbers, each with its reason, and the checks of the flags
that go together: all made before anything is read or predicted."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from dpsuite.analysis.scaling.model import MIB
from dpsuite.errors import UserError

# 2^20 workers: ten times the largest GPU clusters built (about 10^5 GPUs).
MAX_WORKERS = 2**20
# 2^20 samples on one worker: beyond any per-GPU batch published (DLRM's reach 2^16).
MAX_BATCH = 2**20
# DDP holds every parameter and its gradient on every GPU: 10^11 of them in fp32 are 800 GB,
# beyond any GPU's memory.
MAX_PARAMS = 1e11
# 6 FLOPs per parameter and token: 10^11 parameters x a million-token sample is 6 x 10^17.
MAX_FLOPS_PER_SAMPLE = 1e18
# 10^9 samples/s on one GPU is about two clock cycles a sample.
MAX_SAMPLES_PER_S = 1e9
# 10^5 TFLOP/s: ten times the largest per-GPU peak (low precision, sparse) sold.
MAX_TFLOPS = 1e5
# The model schedules each bucket at each worker count; 10^5 all-reduces a step is no DDP setup.
MAX_BUCKETS = 100_000
# One worker's compute of one step beyond a day is a typo in --batch or the workload's counts.
MAX_STEP_S = 86_400.0


MAX_GRAD_ACCUM = 65_536  # micro-batches a step: far beyond any published recipe's


def check_numbers(a: argparse.Namespace) -> None:
    """Each number's range, on its own."""
    if a.batch < 1 or a.max_workers < 1:
        raise UserError("--batch and --max-workers must be >= 1")
    if a.baseline_workers < 1:
        raise UserError(f"--baseline-workers must be >= 1, got {a.baseline_workers}")
    _at_most("--batch", a.batch, MAX_BATCH, "beyond any per-GPU batch")
    for flag, value in (
        ("--max-workers", a.max_workers),
        ("--baseline-workers", a.baseline_workers),
        ("--node-workers", a.node_workers),
    ):
        _at_most(flag, value, MAX_WORKERS, "ten times the largest GPU clusters")
    for flag, value, high, why in (
        ("--params", a.params, MAX_PARAMS, "DDP holds them all on every GPU"),
        ("--flops-per-sample", a.flops_per_sample, MAX_FLOPS_PER_SAMPLE, "6 x 1e11 x 1e6 tokens"),
        ("--samples-per-s", a.samples_per_s, MAX_SAMPLES_PER_S, "two GPU clock cycles a sample"),
        ("--tflops", a.tflops, MAX_TFLOPS, "ten times any GPU's peak"),
    ):
        if value is not None and value <= 0:
            raise UserError(f"{flag} must be > 0, got {value:g}")
        _at_most(flag, value, high, why)
    if a.params is not None and (a.params < 1 or a.params != int(a.params)):
        raise UserError(f"--params is a count of parameters, a whole number, got {a.params:g}")
    if a.bucket_mb <= 0:
        raise UserError(f"--bucket-mb must be > 0, got {a.bucket_mb:g}")
    if not 1 <= a.grad_accum <= MAX_GRAD_ACCUM:
        raise UserError(f"--grad-accum must be from 1 to {MAX_GRAD_ACCUM:,}, got {a.grad_accum}")


def _at_most(flag: str, value: float | None, high: float, why: str) -> None:
    if value is not None and value > high:
        limit, got = (f"{x:,}" if isinstance(x, int) else f"{x:g}" for x in (high, value))
        raise UserError(f"{flag} must be at most {limit} ({why}), got {got}")


def check_buckets(params: float, bucket_mb: float, bytes_per_param: int = 8) -> None:
    """The gradients of ``params`` (at their widest dtype) in at most MAX_BUCKETS buckets."""
    buckets = params * bytes_per_param / (bucket_mb * MIB)
    if buckets > MAX_BUCKETS:
        raise UserError(
            f"--bucket-mb {bucket_mb:g}: {params:g} parameters' gradients would be "
            f"{buckets:,.0f} buckets (at most {MAX_BUCKETS:,}): give a larger --bucket-mb"
        )


def worker_counts(text: str) -> list[int]:
    """``--workers 8,16,96``: whole numbers from 1 to MAX_WORKERS, none empty or repeated."""
    items = [w.strip() for w in text.split(",")]
    try:
        counts = [int(w) for w in items]
    except ValueError:
        raise UserError(f"--workers: comma-separated whole numbers, got {text!r}") from None
    if len(set(counts)) != len(counts):
        raise UserError(f"--workers: a worker count is given twice in {text!r}")
    if min(counts) < 1:
        raise UserError(f"--workers: worker counts must be >= 1, got {text!r}")
    if max(counts) > MAX_WORKERS:
        raise UserError(f"--workers: worker counts must be at most {MAX_WORKERS:,}, got {text!r}")
    return sorted(counts)


def check_baseline(baseline: int, counts: list[int]) -> None:
    """Efficiency against more workers than a predicted count is not an efficiency."""
    if baseline > counts[0]:
        raise UserError(
            f"--baseline-workers {baseline} is more than the fewest workers predicted at "
            f"({counts[0]}): give --workers from {baseline} up, or a smaller --baseline-workers"
        )


def _others(a: argparse.Namespace, p: argparse.ArgumentParser, flag: str) -> list[str]:
    """The arguments given besides ``flag``, as the user wrote them."""
    return [
        "RESULTS_DIR" if key == "results_dir" else "--" + key.replace("_", "-")
        for key, value in vars(a).items()
        if key != flag and value != p.get_default(key)
    ]


def only_flag(a: argparse.Namespace, p: argparse.ArgumentParser, flag: str) -> None:
    """``flag`` does one thing and takes no other argument."""
    given = _others(a, p, flag)
    if given:
        raise UserError(
            f"--{flag.replace('_', '-')} takes no other arguments: drop {', '.join(given)}"
        )


def published_extras(a: argparse.Namespace, p: argparse.ArgumentParser) -> None:
    """``--published`` prints the published comparison and takes nothing else."""
    given = _others(a, p, "published")
    if given:
        raise UserError(
            f"--published takes no other arguments (it prints the published comparison): "
            f"drop {', '.join(given)}"
        )


def check_step(step_s: float, batch: int, workload: str) -> None:
    """One worker's compute of one step within MAX_STEP_S."""
    if step_s > MAX_STEP_S:
        raise UserError(
            f"--batch {batch}: one step of {workload} would compute for {step_s / 3600:,.0f} "
            "hours on one worker (more than a day): check --batch and the workload's counts"
        )


def check_out(out: str) -> None:
    """``--out`` a directory, or a path one can be made at."""
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise UserError(f"--out {out}: exists and is not a directory")
    parent = path
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise UserError(f"--out {out}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(f"--out {out}: {parent} is not writable")


def make_out(out: str) -> None:
    """``--out``'s directory, made before anything is printed: what cannot be made there (a
    file system that takes no directories) is one line, not a table and then an error."""
    try:
        Path(out).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"--out {out}: cannot make it: {exc.strerror or exc}") from None
