"""dpsuite's measurement overhead against bare PyTorch loops, as ratios.

    python tests/bench/overhead.py [--only train|comm|noise] [--workloads NAME ...]
        [--seconds 120] [--block-s 0.25] [--model-size small|standard] [--threads 1]
        [--repeats 5] [--suite-overrides KEY=VALUE ...] [--bare-against-bare]

1. training (interleaved, tests/bench/interleaved.py): in the same 2 processes and process
   group, blocks of the suite's training step (the loop of ``dpsuite run``) alternate with
   blocks of a bare nanoGPT-like DDP step on the same model, data and optimizer; per case the
   median over adjacent block pairs of suite / bare throughput, its bootstrap 95 % interval,
   the number of pairs, and the CPU time per step (user + system, both ranks) of each side.
   Cases: mnist1d_mlp at per-worker batch 32 and 128, cifar_resnet, the standard models
   resnet50 (needs torchvision; one worker) and gpt2, at a CPU-sized shape unless ``--model-size
   standard``, and npy-loader: samples read from files by a Dataset through one loader worker
   per rank (the bare side: a plain DataLoader with DistributedSampler). ``--bare-against-bare``
   puts a second bare loop in the suite's place (A/A): the ratio the bench reports when there
   is no difference to find;
2. bandwidth: ``busbw`` of ``dpsuite comm-bench`` / the bare all-reduce loop's
   (reference/bare_allreduce.py) at 1, 4, 16 and 64 MiB, fp32, 2 ranks;
3. noise scale (``--only noise``): ``samples_per_s`` with the gradient noise scale measured
   (the default) / without it (``noise_scale.enabled=false``), mnist1d_mlp: 2 DDP workers,
   one worker splitting its batch, 16 simulated workers.

2 and 3 compare separate processes, ``--repeats`` times alternating which runs first; on a busy
machine their ratios are noisy. 1 cancels load that changes slower than a block pair.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # run as a script: the suite and tests.bench from this checkout

from tests.bench.interleaved import Plan  # noqa: E402
from tests.bench.overhead_stats import Block, Summary, summarize  # noqa: E402

REFERENCE = Path(__file__).resolve().parent / "reference"
WORKERS = 2
SIZES_MIB = [1, 4, 16, 64]
ITERS = 100  # at 1 MiB one all-reduce takes ~2 ms here: 20 would time a 40 ms window
# case -> the run's overrides (2 workers); the model-size dependent ones come from SHAPES.
TRAIN_CASES = {
    "mnist1d_mlp": ["workload=mnist1d_mlp", "workload.num_samples=25000", "batch.per_worker=32"],
    "mnist1d_mlp-128": [
        "workload=mnist1d_mlp",
        "workload.num_samples=50000",
        "batch.per_worker=128",
    ],
    "cifar_resnet": ["workload=cifar_resnet", "workload.num_samples=2000", "batch.per_worker=16"],
    "resnet50": ["workload=torchvision", "workload.arch=resnet50", "workload.num_samples=400"],
    "gpt2": ["workload=gpt2", "workload.num_samples=400"],
    # A team's job: samples read from files by a Dataset, one loader worker per rank.
    "npy-loader": [
        "workload=tests.dataset_workloads:NpyRegression",
        "workload.num_samples=4000",
        "workload.dims=64",
        "batch.per_worker=32",
        "data.loader_workers=1",
        "lr_rule.base_lr=0.002",  # 64 inputs of unit variance: the recipe's LR would diverge
    ],
}
SHAPES = {
    "small": {
        "resnet50": ["workload.image_size=64", "batch.per_worker=8"],
        "gpt2": ["workload.layers=2", "workload.width=128", "workload.heads=4"]
        + ["workload.context=128", "batch.per_worker=4"],
    },
    "standard": {
        "resnet50": ["workload.image_size=224", "batch.per_worker=8"],
        "gpt2": ["workload.size=124M", "workload.context=1024", "batch.per_worker=1"],
    },
}
NEEDS = {"resnet50": "torchvision"}
# Cases that run on fewer workers than WORKERS: ResNet-50 as one worker (its step is seconds on
# a CPU core, so one worker's per-step overhead is what the ratio shows).
CASE_WORKERS = {"resnet50": 1}
# Cases whose files are written once into the benchmark's temporary directory: the key naming it.
TMP_DIR_KEYS = {"npy-loader": "workload.data_dir"}
# Enough epochs that the run's step budget outlasts the measurement (evaluations are not run).
LONG_RUN = ["train.epochs=100000", "train.eval_at_start=false", "lr_rule.warmup_epochs=0"]


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
            "dpsuite",
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


def suite_busbw(tmp: Path, env: dict[str, str]) -> dict[int, float]:
    from dpsuite import results

    out = tmp / f"bench-{len(list(tmp.glob('bench-*')))}"
    sizes = ",".join(f"{m}M" for m in SIZES_MIB)
    run(
        [
            sys.executable,
            "-m",
            "dpsuite",
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


def measure_training(
    names: list[str], size: str, plan: Plan, threads_per_worker: int, tmp: Path
) -> None:
    extra = f" (suite with {' '.join(EXTRA_OVERRIDES)})" if EXTRA_OVERRIDES else ""
    if plan.bare_against_bare:
        extra = " (A/A: a second bare loop in the suite's place)"
    print(
        f"training, {WORKERS} workers (unless the case says) x {threads_per_worker} thread(s),"
        f" interleaved blocks of "
        f"~{plan.block_s} s for ~{plan.budget_s:.0f} s per case: suite / bare throughput{extra}"
    )
    print(
        f"  {'case':16s} {'median':>7s} {'95 % interval':>15s} {'pairs':>5s} {'steps/block':>11s}"
        f" {'CPU ms/step bare':>16s} {'suite':>6s}"
    )
    for name in names:
        missing = NEEDS.get(name)
        if missing and importlib.util.find_spec(missing) is None:
            print(
                f"  {name:16s} skipped: {missing} is not installed: pip install 'dpsuite[vision]'"
            )
            continue
        overrides = [*TRAIN_CASES[name], *SHAPES[size].get(name, []), *LONG_RUN]
        workers = CASE_WORKERS.get(name, WORKERS)
        overrides += [f"workers={workers}", f"threads_per_worker={threads_per_worker}"]
        overrides += [*EXTRA_OVERRIDES, f"results_dir={tmp / 'runs' / name}"]
        if name in TMP_DIR_KEYS:
            overrides.append(f"{TMP_DIR_KEYS[name]}={tmp / 'files' / name}")
        k, s = interleaved_case(overrides, plan, tmp)
        label = name if workers == WORKERS else f"{name} ({workers} worker)"
        print(
            f"  {label:16s} {s.median_ratio:7.3f}   [{s.low:.3f}, {s.high:.3f}] {s.pairs:5d}"
            f" {k:11d} {1e3 * s.bare_cpu_s:16.2f} {1e3 * s.suite_cpu_s:6.2f}",
            flush=True,
        )


def interleaved_case(overrides: list[str], plan: Plan, tmp: Path) -> tuple[int, Summary]:
    """Steps per block and the summary of one case, its ranks spawned as `dpsuite run` does."""
    from dpsuite.conf.compose import compose_config
    from dpsuite.conf.run_spec import resolve
    from dpsuite.engine import data_memo
    from dpsuite.runtime import distributed as dd
    from tests.bench import interleaved

    spec = resolve(compose_config(overrides))
    data_memo.load_data(spec.build_workload())  # generated once here, as a launch does
    out = tmp / "interleaved.json"
    dd.spawn_local(
        interleaved.rank_main,
        (spec, plan, out),
        spec.workers,
        spec.threads_per_worker,
        spec.cfg.ddp.start_method,
        scratch=tmp,
    )
    result = json.loads(out.read_text())
    blocks = [Block(**b) for b in result["blocks"]]
    return result["steps_per_block"], summarize(blocks, result["steps_per_block"])


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
    p.add_argument("--repeats", type=int, default=5, help="comm and noise: pairs of processes")
    p.add_argument("--only", choices=["train", "comm", "noise"], default=None)
    p.add_argument("--workloads", nargs="+", choices=list(TRAIN_CASES), default=list(TRAIN_CASES))
    p.add_argument("--seconds", type=float, default=120.0, help="training: per case, blocks only")
    p.add_argument("--block-s", type=float, default=0.25, help="training: target block length")
    p.add_argument("--warmup-steps", type=int, default=10, help="training: of each side")
    p.add_argument("--min-pairs", type=int, default=10)
    p.add_argument("--model-size", choices=list(SHAPES), default="small")
    p.add_argument("--threads", type=int, default=1, help="training: threads per worker")
    p.add_argument("--suite-overrides", nargs="*", default=[], help="extra `dpsuite run` overrides")
    p.add_argument(
        "--bare-against-bare",
        action="store_true",
        help="training: A/A, a second bare loop in the suite's place (the bench's noise floor)",
    )
    args = p.parse_args()
    for name, value in (("--seconds", args.seconds), ("--block-s", args.block_s)):
        if value <= 0:
            sys.exit(f"{name} must be > 0, got {value}")
    if args.min_pairs < 2 or args.threads < 1 or args.warmup_steps < 0:
        sys.exit("--min-pairs must be >= 2, --threads >= 1, --warmup-steps >= 0")
    EXTRA_OVERRIDES.extend(args.suite_overrides)
    plan = Plan(
        args.warmup_steps, args.block_s, args.seconds, args.min_pairs, args.bare_against_bare
    )
    with tempfile.TemporaryDirectory(prefix="dpsuite-overhead-") as tmp:
        env = {**os.environ, "PYTHONPATH": str(REPO), "DPSUITE_CACHE_DIR": str(Path(tmp, "cache"))}
        os.environ["DPSUITE_CACHE_DIR"] = env["DPSUITE_CACHE_DIR"]
        if args.only in (None, "train"):
            measure_training(args.workloads, args.model_size, plan, args.threads, Path(tmp))
        if args.only in (None, "comm"):
            measure_comm(args.repeats, Path(tmp), env)
        if args.only in (None, "noise"):
            measure_noise_scale(args.repeats, Path(tmp), env)


if __name__ == "__main__":
    main()
