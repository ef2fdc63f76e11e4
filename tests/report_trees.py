"""Small synthetic results trees for report tests, written with the real results writer.

The numbers are chosen so that every finding has a known answer; the tests recompute the
expected sentences from the constants here.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from dpsuite import results

TARGET = 0.85
EPOCHS = 3
STEPS_PER_EPOCH = 10
PER_WORKER = 32
BASE_LR = 0.1

# Scaling: samples/s per worker count; compute time is flat, the rest of a step is exposed comm.
THROUGHPUT = {1: 1000.0, 2: 1900.0, 4: 3400.0, 8: 5200.0}
REPEAT_SPREAD = (1.0, 1.03, 0.98)  # throughput of repeat r relative to the first one
COMPUTE_S = 0.032  # the 1-worker step: no communication there

# Convergence, a fixed budget: mean final accuracy per rule and global batch (seeds are mean
# -/+ 0.01); None means both seeds diverged. Steps to the 85 % target where it is reached. An
# epoch is CONVERGENCE_SAMPLES / B steps, so the 3-epoch budget is 1.5x the steps batch 32 needs
# (400 of 600): no batch could take 2x its perfect-scaling steps within it.
ACCURACY = {
    "naive": {32: 0.91, 64: 0.88, 128: 0.80, 256: 0.62},
    "linear": {32: 0.91, 64: 0.905, 128: None, 256: None},
    "linear_warmup": {32: 0.91, 64: 0.91, 128: 0.905, 256: 0.89},
}
CONVERGENCE_SAMPLES = 6400
STEPS_TO_TARGET = {32: 400, 64: 210, 128: 120, 256: 70}
SEEDS = (0, 1)
# Gradient noise scale B_simple at each evaluation after the first step (it grows in training,
# then holds), scaled a little with the global batch so the lines in the plot are told apart.
GNS_BY_EPOCH = {1: 50.0, 2: 100.0, 3: 200.0}


def gns_at(epoch: int, batch: int) -> float:
    return GNS_BY_EPOCH[min(epoch, max(GNS_BY_EPOCH))] * (batch / PER_WORKER) ** 0.1


# A steps-to-target study: runs stop at 80 % within 16 epochs, three seeds, batch 32 under
# `naive` only (every rule is the same run there), the rules and a two-point `power` grid at
# 64 ... 512. Steps per seed; None: the seed did not reach the target.
STUDY_TARGET = 0.80
STUDY_EPOCHS = 16
STUDY_SEEDS = (0, 1, 2)
STUDY_STEPS = {
    ("naive", None): {
        32: (390, 400, 420),
        64: (300, 310, 320),
        128: (250, 260, 270),
        256: (None, 240, None),  # two of three missed: the median is never
        512: (None, None, None),
    },
    ("linear", None): {
        64: (205, 200, 210),  # the oracle at 64, with the largest LR tried there
        128: (150, 140, None),  # one missed: the median (150) counts it as never
        256: (None, None, None),
        512: (None, None, None),
    },
    ("linear_warmup", None): {
        64: (220, 215, 225),
        128: (110, 108, 115),  # the oracle at 128
        256: (85, 82, 90),
        512: (None, None, 150),
    },
    ("sqrt", None): {
        64: (260, 250, 270),
        128: (160, 150, 170),
        256: (80, 78, 82),  # the oracle at 256: 1.6x perfect scaling (50)
        512: (95, 90, 100),
    },
    ("power", 0.25): {
        64: (240, 230, 250),
        128: (180, 170, 190),
        256: (150, 140, 160),
        512: (None, 300, None),
    },
    ("power", 0.75): {
        64: (230, 225, 235),
        128: (130, 125, 135),
        256: (100, 95, 105),
        512: (90, 88, 92),  # the oracle at 512: 3.6x perfect scaling (25), past the knee
    },
}
# A second workload's study: the same but for `linear_warmup`, which misses the target from 256
# on, so warmup holds linear scaling no further than `linear` does (to 128 in both), while the
# oracle, its knee and B_simple are those of STUDY_STEPS.
SECOND_STUDY_STEPS = {
    **STUDY_STEPS,
    ("linear_warmup", None): {
        64: (220, 215, 225),
        128: (110, 108, 115),
        256: (None, None, None),
        512: (None, None, None),
    },
}
# B_simple pooled over a run that reached the target; runs that missed it measured a collapsed
# model's few samples.
STUDY_POOLED = {0: 120.0, 1: 150.0, 2: 240.0}
MISSED_POOLED = 4.0
RULE_EXPONENTS = {"naive": 0.0, "sqrt": 0.5, "linear": 1.0, "linear_warmup": 1.0, "lars": 0.5}


def hardware(
    tag: str | None, host: str = "box", cpu: str = "Test CPU", oversubscribed: bool = False
) -> dict:
    return {
        "oversubscribed": oversubscribed,
        "tag": tag,
        "hostname": host,
        "cpu": cpu,
        "cpu_count": 8,
        "accelerator": "none",
        "accelerator_count": 0,
        "backend": "gloo",
        "torch": "2.13.0+cpu",
        "machine_id": f"id-{host}",
    }


def exponent_of(rule: str, exponent: float | None) -> float:
    return exponent if exponent is not None else RULE_EXPONENTS.get(rule, 1.0)


def warms_up(rule: str, batch: int) -> bool:
    """Warmup only upward: never at the base batch (as the engine's rules)."""
    return rule in ("linear_warmup", "power", "lars") and batch > 32


def lr_at(rule: str, batch: int, step: int, total: int, exponent: float | None = None) -> float:
    """A warmup + cosine schedule like the engine's, enough to draw plot 8."""
    peak = BASE_LR * (batch / 32) ** exponent_of(rule, exponent)
    warm = STEPS_PER_EPOCH if warms_up(rule, batch) else 0
    if step < warm:
        return BASE_LR + (peak - BASE_LR) * step / warm
    return peak * 0.5 * (1 + math.cos(math.pi * (step - warm) / max(total - warm, 1)))


def write_run(
    root: Path,
    *,
    workers: int,
    lr_rule: str = "linear_warmup",
    mode: str = "ddp",
    seed: int = 0,
    repeat: int = 0,
    status: str = "complete",
    final_acc: float | None = 0.9,
    samples_per_s: float | None = None,
    timing: bool = True,
    steps_to_target: int | None = None,
    tag: str | None = "box-a",
    host: str = "box",
    error: str | None = None,
    workload: str = "mnist1d_mlp",
    epochs: int = EPOCHS,
    compute_s: float = COMPUTE_S,
    sync: str | None = None,
    sync_label: str | None = None,
    sync_metrics: dict | None = None,
    sync_config: dict | None = None,
    noise_scale: bool = False,
    pooled: float | None = None,
    oversubscribed: bool = False,
    steps_per_epoch: int = STEPS_PER_EPOCH,
    lr_exponent: float | None = None,
    target: float = TARGET,
    stop_at_target: bool = False,
) -> Path:
    """One run. Without ``sync`` the record has no strategy keys, like results from before
    strategies were recorded; ``sync_config``: its recorded ``config.sync``. ``pooled``:
    B_simple pooled over the run (with ``noise_scale``)."""
    batch = workers * PER_WORKER
    exponent = exponent_of(lr_rule, lr_exponent)
    summary = {
        "workload": workload,
        "mode": mode,
        "workers": workers,
        "per_worker_batch": PER_WORKER,
        "global_batch": batch,
        "lr_rule": lr_rule,
        "base_lr": BASE_LR,
        "base_batch": 32,
        "lr_exponent": exponent,
        "peak_lr": BASE_LR * (batch / 32) ** exponent,
        "warmup_epochs": 1.0 if warms_up(lr_rule, batch) else 0.0,
        "epochs": epochs,
        "seed": seed,
        "repeat": repeat,
        "precision": "fp32",
        "device": "cpu",
        "target_acc": target,
    }
    if sync is not None:
        summary.update(sync=sync, sync_label=sync_label or sync)
    # The config a run would record, and its run id computed from it as a run computes it.
    config = {
        **summary,
        "host": host,
        "hardware": {"tag": tag},
        "train": {"stop_at_target": stop_at_target},
        **({"sync": sync_config} if sync_config else {}),
    }
    run_id = results.make_run_id(summary, results.run_identity(config, workers, batch))
    writer = results.RunWriter(root / run_id)
    writer.start(
        {
            "run_id": run_id,
            **summary,
            "config": config,
            "hardware": hardware(tag, host, oversubscribed=oversubscribed),
            "steps_per_epoch": steps_per_epoch,
            "total_steps": epochs * steps_per_epoch,
        }
    )
    if status == "failed":
        writer.finish("failed", error=error or "worker 3 exited with code 1")
        return writer.dir
    total = epochs * steps_per_epoch
    diverge_epoch = 2 if status == "diverged" else None
    measured = []  # B_simple at each evaluation that has one
    for epoch in range(epochs + 1):
        step = epoch * steps_per_epoch
        finite = diverge_epoch is None or epoch < diverge_epoch
        acc = 0.1 + ((final_acc or 0.6) - 0.1) * math.sqrt(epoch / epochs)
        gns = {}
        if noise_scale and finite and epoch > 0:
            measured.append(gns_at(epoch, batch))
            grad_sq = 1.0 / epoch
            gns = {
                "grad_noise_scale": measured[-1],
                "gns_grad_sq": grad_sq,
                "gns_trace": measured[-1] * grad_sq,
            }
        writer.append_epoch(
            {
                "epoch": epoch,
                "step": step,
                "samples_seen": step * batch,
                "lr": lr_at(lr_rule, batch, step, total, exponent),
                "train_loss": 2.3 - epoch * 0.5 if finite else float("nan"),
                "eval_loss": 2.2 - epoch * 0.5 if finite else float("nan"),
                "eval_acc": acc if finite else 0.098,
                "wall_s": 1.0 + epoch,
                **gns,
            }
        )
        if not finite:
            break
    writer.write_steps(
        {
            "step": s,
            "step_time_s": 0.01,
            "comm_s": "",
            "comm_wait_s": "",
            "lr": lr_at(lr_rule, batch, s, total, exponent),
        }
        for s in range(5, min(total, 100))  # enough to draw the LR schedule
    )
    tput = samples_per_s if samples_per_s is not None else 800.0 * workers
    step_time = batch / tput
    exposed = step_time - compute_s if timing else None
    metrics = {
        "samples_per_s": tput,
        "samples_per_s_per_worker": tput / workers,
        "step_time_s": step_time,
        "step_time_p90_s": step_time * 1.1,
        "compute_time_s": compute_s if timing else None,
        "comm_time_s": 2 * exposed if timing else None,
        "exposed_comm_s": exposed,
        "comm_fraction": exposed / step_time if timing else None,
        "steps": total,
        "final_eval_acc": 0.098 if status == "diverged" else final_acc,
        "best_eval_acc": final_acc,
        "steps_to_target": steps_to_target,
        "epochs_to_target": None if steps_to_target is None else steps_to_target / steps_per_epoch,
        "grad_noise_scale": {
            "final": measured[-1],
            "mean": sum(measured) / len(measured),
            "pooled": pooled,
            "method": "halves",
            "b_small": PER_WORKER if workers > 1 else PER_WORKER // 2,
            "b_big": batch,
            "estimates": total,
        }
        if measured
        else None,
        **(sync_metrics or {}),
    }
    err = "non-finite eval loss at step 20 (epoch 2)" if status == "diverged" else None
    writer.finish(status, error=err, metrics=metrics)
    return writer.dir


def write_scaling(
    root: Path,
    tag: str | None = "box-a",
    speed: float = 1.0,
    timing: bool = True,
    host: str = "box",
    cores: int | None = None,
    repeats: int = 1,
) -> None:
    """A scaling sweep: 1..8 real workers, one rule, a short (1-epoch) budget; worker counts
    above ``cores`` are oversubscribed (one thread per worker). Repeats vary around the same
    median (``REPEAT_SPREAD``)."""
    for workers, tput in THROUGHPUT.items():
        for repeat in range(repeats):
            write_run(
                root,
                workers=workers,
                repeat=repeat,
                samples_per_s=speed * tput * REPEAT_SPREAD[repeat],
                timing=timing,
                tag=tag,
                host=host,
                epochs=1,
                compute_s=COMPUTE_S / speed,
                oversubscribed=cores is not None and workers > cores,
            )


# Two machines' repeated scaling runs (samples/s per repeat): B is as fast at 1 worker, 20 %
# slower at 2 workers, in every repeat.
REPEATED_A = {1: [1000.0, 1040.0, 960.0], 2: [1900.0, 1950.0, 1850.0]}
REPEATED_B = {1: [1010.0, 990.0, 1030.0], 2: [1500.0, 1560.0, 1540.0]}


def write_repeated(root: Path, tag: str, by_workers: dict[int, list[float]]) -> None:
    """A scaling sweep with repeats: the samples/s of each repeat at each worker count."""
    for workers, measured in by_workers.items():
        for repeat, tput in enumerate(measured):
            write_run(root, workers=workers, samples_per_s=tput, tag=tag, host=tag, repeat=repeat)


def write_convergence(root: Path, noise_scale: bool = True) -> None:
    for rule, by_batch in ACCURACY.items():
        for batch, acc in by_batch.items():
            for seed in SEEDS:
                reached = acc is not None and acc >= TARGET
                write_run(
                    root,
                    workers=batch // PER_WORKER,
                    mode="simulated",
                    lr_rule=rule,
                    seed=seed,
                    status="diverged" if acc is None else "complete",
                    final_acc=None if acc is None else acc + (0.01 if seed else -0.01),
                    steps_to_target=STEPS_TO_TARGET[batch] if reached else None,
                    noise_scale=noise_scale,
                    steps_per_epoch=CONVERGENCE_SAMPLES // batch,
                )


def write_target_study(
    root: Path,
    noise_scale: bool = True,
    workload: str = "mnist1d_mlp",
    steps: dict[tuple[str, float | None], dict[int, tuple]] = STUDY_STEPS,
) -> None:
    """The steps-to-target study of ``steps`` (``STUDY_STEPS``): runs that miss the target end at
    the budget, those of `linear` at 256 and 512 by diverging."""
    for (rule, exponent), by_batch in steps.items():
        for batch, per_seed in by_batch.items():
            for seed, steps in zip(STUDY_SEEDS, per_seed, strict=True):
                diverged = steps is None and rule == "linear"
                write_run(
                    root,
                    workers=batch // PER_WORKER,
                    mode="simulated",
                    lr_rule=rule,
                    lr_exponent=exponent,
                    seed=seed,
                    status="diverged" if diverged else "complete",
                    final_acc=None if diverged else (STUDY_TARGET if steps else 0.5),
                    steps_to_target=steps,
                    noise_scale=noise_scale,
                    pooled=STUDY_POOLED[seed] if steps else MISSED_POOLED,
                    steps_per_epoch=CONVERGENCE_SAMPLES // batch,
                    epochs=STUDY_EPOCHS,
                    target=STUDY_TARGET,
                    stop_at_target=True,
                    workload=workload,
                )


def write_comm_bench(
    root: Path,
    tag: str = "box-a",
    peak: float = 4.0,
    world: int = 2,
    collective: str | None = None,
) -> None:
    """A comm-bench result; without ``collective`` its rows have none (as before there were
    other collectives: they read as all_reduce). On one rank ``peak`` is the algbw's: no bytes
    cross between ranks, busbw is 0."""
    factor = 2 * (world - 1) / world if collective in (None, "all_reduce") else (world - 1) / world
    rows = []
    for e in range(10, 25, 2):
        size = 2**e
        rate = peak * size / (size + 2**18)
        busbw, algbw = (rate, rate / factor) if world > 1 else (0.0, rate)
        rows.append(
            {
                "collective": collective,
                "size_bytes": size,
                "count": size // 4,
                "dtype": "float32",
                "time_us": size / (algbw * 1e3),
                "algbw_GBps": algbw,
                "busbw_GBps": busbw,
                "errors": 0,
            }
        )
    bench_id = f"bench-{tag}" + (f"-{collective}" if collective else "")
    meta = {
        "bench_id": bench_id,
        "world_size": world,
        "backend": "gloo",
        "hardware": hardware(tag, tag),
    }
    results.write_comm_bench(root / "comm_bench" / bench_id, meta, rows)


def write_failures(root: Path) -> dict[str, Path]:
    """A failed run, a stale 'running' run, and damaged files; returns what was damaged."""
    failed = write_run(root, workers=16, status="failed")
    stale = write_run(root, workers=1, lr_rule="sqrt", seed=9)
    # The damaged runs are of another workload at one batch: they form no series of their own.
    other = {"workload": "mnist1d_cnn", "workers": 2, "mode": "simulated", "lr_rule": "sqrt"}
    rec = results.read_json(stale / "run.json")
    rec.update(status="running", pid=2**22 + 4321, host=os.uname().nodename)
    results.write_json_atomic(stale / "run.json", rec)
    truncated = root / "broken-run" / "run.json"
    truncated.parent.mkdir(parents=True)
    truncated.write_text('{"run_id": "broken-run", "status": "compl')
    minimal = root / "minimal" / "run.json"  # valid JSON that lacks almost every key
    results.write_json_atomic(minimal, {"run_id": "minimal", "status": "complete"})
    garbage_epochs = write_run(root, seed=5, **other) / "epochs.csv"
    garbage_epochs.write_bytes(b"\x00\xff\xfe garbage \x89PNG\n\x00\x00")
    bad_steps = write_run(root, seed=6, **other) / "steps.csv"
    bad_steps.write_text("time,value\n1,2\n")
    return {
        "failed": failed,
        "stale": stale,
        "truncated": truncated,
        "epochs": garbage_epochs,
        "steps": bad_steps,
    }


# Synchronization strategies: per strategy label, its `sync` name and per worker count
# (samples/s, bytes per step per worker, server bytes per step, final accuracy).
GRAD = 315_432  # the MNIST-1D MLP's gradient in fp32: 78,858 parameters x 4 bytes
ONE_WORKER = (1000.0, 0, None, 0.90)
SYNC = {
    "allreduce": (
        "allreduce",
        {1: ONE_WORKER, 2: (1800.0, GRAD, None, 0.90), 4: (3000.0, GRAD, None, 0.89)},
    ),
    "param_server": (
        "param_server",
        {
            1: ONE_WORKER,
            2: (1500.0, 2 * GRAD, 2 * GRAD, 0.90),
            4: (1600.0, 2 * GRAD, 6 * GRAD, 0.89),
        },
    ),
    "local_sgd (period 4)": (
        "local_sgd",
        {1: ONE_WORKER, 2: (1950.0, GRAD / 4, None, 0.88), 4: (3600.0, GRAD / 4, None, 0.87)},
    ),
    "fp16": (
        "fp16",
        {1: ONE_WORKER, 2: (1850.0, GRAD / 2, None, 0.90), 4: (3200.0, GRAD / 2, None, 0.89)},
    ),
    "powersgd (rank 1, from step 10)": (
        "powersgd",
        {1: ONE_WORKER, 2: (1700.0, 6384, None, 0.87), 4: (2900.0, 6384, None, 0.85)},
    ),
}


def write_sync(root: Path) -> None:
    """A `sync` sweep: five strategies on 1, 2 and 4 workers."""
    for label, (name, by_workers) in SYNC.items():
        for workers, (tput, nbytes, server, acc) in by_workers.items():
            write_run(
                root,
                workers=workers,
                samples_per_s=tput,
                final_acc=acc,
                epochs=1,
                sync=name,
                sync_label=label,
                sync_metrics={
                    "wire_bytes_per_step": nbytes,
                    "server_wire_bytes_per_step": server if workers > 1 else None,
                    "collectives_per_step": 0 if workers == 1 else 1,
                },
            )
