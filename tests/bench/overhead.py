"""dpsuite's measurement overhead against the bare reference loops, as two ratios.

    python tests/bench/overhead.py [--repeats 5] [--only train|comm] [--workloads NAME ...]
                                   [--suite-overrides KEY=VALUE ...]

1. throughput: ``samples_per_s`` of ``dpsuite run`` / the bare DDP loop's (reference/bare_ddp.py),
   for mnist1d_mlp (per-worker batch 32 and 128) and cifar_resnet on 2 workers with the same
   per-worker batch, threads and number of timed steps (the bare loop runs on random data of
   the same shapes); and torchvision's ResNet-50 at 224 px, one worker, batch 8
   (``--workloads resnet50``; needs torchvision, which `nox -s overhead` installs);
2. bandwidth: ``busbw`` of ``dpsuite comm-bench`` / the bare all-reduce loop's
   (reference/bare_allreduce.py) at 1, 4, 16 and 64 MiB, fp32, 2 ranks;
3. noise scale (``--only noise``): ``samples_per_s`` with the gradient noise scale measured
   (the default) / without it (``noise_scale.enabled=false``), mnist1d_mlp: 2 DDP workers,
   one worker splitting its batch, 16 simulated workers.

Each pair is measured ``--repeats`` times, alternating which of the two runs first; every
measurement is printed, then the median ratio. Timings on a busy machine are noisy: say so when
quoting them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
REFERENCE = Path(__file__).resolve().parent / "reference"
WORKERS = 2
SIZES_MIB = [1, 4, 16, 64]
ITERS = 100  # at 1 MiB one all-reduce takes ~2 ms here: 20 would time a 40 ms window
# workload -> (dpsuite overrides, bare_ddp.py arguments); both time `steps` steps after 5.
# The suite's runs fit in one epoch and skip the initial evaluation, so that no evaluation
# interrupts the timed steps: the comparison is of the measured training loop only.
TRAIN_CASES = {
    "mnist1d_mlp": (
        ["workload=mnist1d_mlp", "workload.num_samples=25000", "batch.per_worker=32"]
        + ["train.epochs=1", "train.max_steps=305", "train.eval_at_start=false"],
        ["--model", "mlp", "--batch", "32", "--steps", "300", "--samples", "20000"],
    ),
    "mnist1d_mlp-128": (
        ["workload=mnist1d_mlp", "workload.num_samples=50000", "batch.per_worker=128"]
        + ["train.epochs=1", "train.max_steps=155", "train.eval_at_start=false"],
        ["--model", "mlp", "--batch", "128", "--steps", "150", "--samples", "40000"],
    ),
    "cifar_resnet": (
        ["workload=cifar_resnet", "workload.num_samples=2000", "batch.per_worker=16"]
        + ["train.epochs=1", "train.max_steps=35", "train.eval_at_start=false"],
        ["--model", "resnet18", "--batch", "16", "--steps", "30", "--samples", "1600"],
    ),
    # A real model on one worker: the suite's per-step work against the same model's bare
    # loop, without communication in either.
    "resnet50": (
        ["workload=torchvision", "workload.arch=resnet50", "workload.num_samples=400"]
        + ["workers=1", "batch.per_worker=8", "timing.calibration_steps=0"]
        + ["train.epochs=1", "train.max_steps=25", "train.eval_at_start=false"],
        ["--model", "resnet50", "--workers", "1", "--batch", "8", "--steps", "20"]
        + ["--samples", "320"],
    ),
}


# The noise scale's three ways of measuring, each against the same run without it. Longer runs
# than above: a measured step comes once in `noise_scale.every` (50), so the mean over many
# steps is what it costs.
NOISE_RUN = ["workload=mnist1d_mlp", "workload.num_samples=25000", "batch.per_worker=32"]
NOISE_RUN += ["train.epochs=5", "train.max_steps=1505", "train.eval_at_start=false"]
NOISE_CASES = {
    "ddp-2-workers": [*NOISE_RUN, f"workers={WORKERS}"],
    "1-worker-split": [*NOISE_RUN, "workers=1", "noise_scale.split_single=true"],
    "simulated-16": [*NOISE_RUN, "mode=simulated", "workers=16"],
}


def threads() -> int:
    return max(1, len(os.sched_getaffinity(0)) // WORKERS)


def run(cmd: list[str], env: dict[str, str]) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env, check=False)
    if proc.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    return proc.stdout


EXTRA_OVERRIDES: list[str] = []  # --suite-overrides, e.g. timing.calibration_steps=0


def suite_samples_per_s(
    overrides: list[str], tmp: Path, env: dict[str, str], name: str | None = None
) -> tuple[float, float]:
    """(samples_per_s, global batch / median step time) of one `dpsuite run`."""
    out = tmp / "runs" / (name or "-".join(o.split("=")[1] for o in overrides[:3]))
    args = [f"workers={WORKERS}", f"threads_per_worker={threads()}", "timing.warmup_steps=5"]
    args = [a for a in args if a.split("=")[0] not in {o.split("=")[0] for o in overrides}]
    args += EXTRA_OVERRIDES
    run(
        [
            sys.executable,
            "-m",
            "suite",
            "run",
            *overrides,
            *args,
            f"results_dir={out}",
            "force=true",
        ],
        env,
    )
    (record,) = [json.loads(p.read_text()) for p in out.rglob("run.json")]
    m = record["metrics"]
    return m["samples_per_s"], record["global_batch"] / m["step_time_s"]


def bare_samples_per_s(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(samples_per_s, global batch / median step time) of one bare DDP loop."""
    cmd = [sys.executable, str(REFERENCE / "bare_ddp.py"), "--workers", str(WORKERS)]
    out = run([*cmd, "--threads", str(threads()), *args], env)
    result = json.loads(out.strip().splitlines()[-1])
    return result["samples_per_s"], result["samples_per_s_at_median_step"]


def suite_busbw(tmp: Path, env: dict[str, str]) -> dict[int, float]:
    from suite import results

    out = tmp / f"bench-{len(list(tmp.glob('bench-*')))}"
    sizes = ",".join(f"{m}M" for m in SIZES_MIB)
    run(
        [
            sys.executable,
            "-m",
            "suite",
            "comm-bench",
            "--workers",
            str(WORKERS),
            "--sizes",
            sizes,
            "--warmup",
            "5",
            "--iters",
            str(ITERS),
            "--results-dir",
            str(out),
        ],
        env,
    )
    frame = results.load_comm_bench(out)
    return dict(zip(frame["size_bytes"].astype(int), frame["busbw_GBps"], strict=True))


def bare_busbw(env: dict[str, str]) -> dict[int, float]:
    cmd = [sys.executable, str(REFERENCE / "bare_allreduce.py"), "--workers", str(WORKERS)]
    out = run(
        [*cmd, "--sizes-mib", *map(str, SIZES_MIB), "--warmup", "5", "--iters", str(ITERS)], env
    )
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return {r["size_bytes"]: r["busbw_GBps"] for r in rows}


def measure_training(repeats: int, names: list[str], tmp: Path, env: dict[str, str]) -> None:
    extra = f" (suite with {' '.join(EXTRA_OVERRIDES)})" if EXTRA_OVERRIDES else ""
    print(
        f"throughput, {WORKERS} workers (resnet50: 1) x {threads()} threads: "
        f"suite / bare loop{extra}"
    )
    print("  (at median step: global batch / median step time, less sensitive to other load)")
    for name in names:
        overrides, bare_args = TRAIN_CASES[name]
        ratios, median_ratios = [], []
        for r in range(repeats):
            if r % 2 == 0:
                s, b = suite_samples_per_s(overrides, tmp, env), bare_samples_per_s(bare_args, env)
            else:
                b, s = bare_samples_per_s(bare_args, env), suite_samples_per_s(overrides, tmp, env)
            ratios.append(s[0] / b[0])
            median_ratios.append(s[1] / b[1])
            print(
                f"  {name:13s} suite {s[0]:9.1f}  bare {b[0]:9.1f} samples/s  ratio "
                f"{ratios[-1]:.3f}   at median step: suite {s[1]:9.1f}  bare {b[1]:9.1f}"
                f"  ratio {median_ratios[-1]:.3f}"
            )
        print(
            f"  {name:13s} median ratio {statistics.median(ratios):.3f}"
            f"   at median step: {statistics.median(median_ratios):.3f}",
            flush=True,
        )


def measure_comm(repeats: int, tmp: Path, env: dict[str, str]) -> None:
    print(f"all-reduce busbw, {WORKERS} ranks, fp32: comm-bench / bare all-reduce loop")
    ratios: dict[int, list[float]] = {}
    for r in range(repeats):
        if r % 2 == 0:
            s, b = suite_busbw(tmp, env), bare_busbw(env)
        else:
            b, s = bare_busbw(env), suite_busbw(tmp, env)
        for size in sorted(b):
            ratios.setdefault(size, []).append(s[size] / b[size])
            print(
                f"  {size >> 20:3d} MiB  comm-bench {s[size]:7.3f}  bare {b[size]:7.3f} GB/s"
                f"  ratio {s[size] / b[size]:.3f}"
            )
    for size, rs in sorted(ratios.items()):
        print(f"  {size >> 20:3d} MiB  median ratio {statistics.median(rs):.3f}", flush=True)


def measure_noise_scale(repeats: int, tmp: Path, env: dict[str, str]) -> None:
    print("gradient noise scale: samples/s measured / not measured (overhead = 1 - ratio)")
    for name, overrides in NOISE_CASES.items():
        ratios = []
        for r in range(repeats):
            first_on = r % 2 == 0  # alternate which runs first
            order = ["true", "false"] if first_on else ["false", "true"]
            a, b = (
                suite_samples_per_s([*overrides, f"noise_scale.enabled={o}"], tmp, env, name)[0]
                for o in order
            )
            on, off = (a, b) if first_on else (b, a)
            ratios.append(on / off)
            print(f"  {name:16s} on {on:9.1f}  off {off:9.1f} samples/s  ratio {ratios[-1]:.3f}")
        med = statistics.median(ratios)
        print(f"  {name:16s} median ratio {med:.3f}  overhead {100 * (1 - med):.1f} %", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--only", choices=["train", "comm", "noise"], default=None)
    p.add_argument("--workloads", nargs="+", choices=list(TRAIN_CASES), default=list(TRAIN_CASES))
    p.add_argument("--suite-overrides", nargs="*", default=[], help="extra `dpsuite run` overrides")
    args = p.parse_args()
    EXTRA_OVERRIDES.extend(args.suite_overrides)
    with tempfile.TemporaryDirectory(prefix="dpsuite-overhead-") as tmp:
        env = {**os.environ, "PYTHONPATH": str(REPO), "DPSUITE_CACHE_DIR": str(Path(tmp, "cache"))}
        sys.path.insert(0, str(REPO))
        if args.only in (None, "train"):
            measure_training(args.repeats, args.workloads, Path(tmp), env)
        if args.only in (None, "comm"):
            measure_comm(args.repeats, Path(tmp), env)
        if args.only in (None, "noise"):
            measure_noise_scale(args.repeats, Path(tmp), env)


if __name__ == "__main__":
    main()
