"""Small synthetic results trees for report tests, written with the real results writer.

The numbers are chosen so that every finding has a known answer; the tests recompute the
expected sentences from the constants here.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from suite import results

TARGET = 0.85
EPOCHS = 3
STEPS_PER_EPOCH = 10
PER_WORKER = 32
BASE_LR = 0.1

# Scaling: samples/s per worker count; compute time is flat, the rest of a step is exposed comm.
THROUGHPUT = {1: 1000.0, 2: 1900.0, 4: 3400.0, 8: 5200.0}
REPEAT_SPREAD = (1.0, 1.03, 0.98)  # throughput of repeat r relative to the first one
COMPUTE_S = 0.032  # the 1-worker step: no communication there

# Convergence: mean final accuracy per rule and global batch (seeds are mean -/+ 0.01);
# None means both seeds diverged. Steps to the 85 % target where it is reached.
ACCURACY = {
    "naive": {32: 0.91, 64: 0.88, 128: 0.80, 256: 0.62},
    "linear": {32: 0.91, 64: 0.905, 128: None, 256: None},
    "linear_warmup": {32: 0.91, 64: 0.91, 128: 0.905, 256: 0.89},
}
# Best-rule steps against perfect scaling (400·32/B): 1.05×, 1.2×, then 3× at 256: a knee.
STEPS_TO_TARGET = {32: 400, 64: 210, 128: 120, 256: 150}
SEEDS = (0, 1)
# Gradient noise scale B_simple at each evaluation after the first step (it grows in training),
# scaled a little with the global batch so the lines in the plot are told apart.
GNS_BY_EPOCH = {1: 50.0, 2: 100.0, 3: 200.0}


def gns_at(epoch: int, batch: int) -> float:
    return GNS_BY_EPOCH[epoch] * (batch / PER_WORKER) ** 0.1


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


def lr_at(rule: str, batch: int, step: int, total: int) -> float:
    """A warmup + cosine schedule like the engine's, enough to draw plot 8."""
    peak = {"naive": BASE_LR, "sqrt": BASE_LR * math.sqrt(batch / 32)}.get(
        rule, BASE_LR * batch / 32
    )
    warm = STEPS_PER_EPOCH if rule == "linear_warmup" else 0
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
    noise_scale: bool = False,
    oversubscribed: bool = False,
) -> Path:
    """One run. Without ``sync`` the record has no strategy keys, like results from before
    strategies were recorded."""
    batch = workers * PER_WORKER
    summary = {
        "workload": workload,
        "mode": mode,
        "workers": workers,
        "per_worker_batch": PER_WORKER,
        "global_batch": batch,
        "lr_rule": lr_rule,
        "base_lr": BASE_LR,
        "base_batch": 32,
        "peak_lr": lr_at(lr_rule, batch, STEPS_PER_EPOCH, 10**9),
        "warmup_epochs": 1.0 if lr_rule == "linear_warmup" else 0.0,
        "epochs": epochs,
        "seed": seed,
        "repeat": repeat,
        "precision": "fp32",
        "device": "cpu",
        "target_acc": TARGET,
    }
    if sync is not None:
        summary.update(sync=sync, sync_label=sync_label or sync)
    # The config a run would record, and its run id computed from it as a run computes it.
    config = {**summary, "host": host, "hardware": {"tag": tag}}
    run_id = results.make_run_id(summary, results.run_identity(config, workers, batch))
    writer = results.RunWriter(root / run_id)
    writer.start(
        {
            "run_id": run_id,
            **summary,
            "config": config,
            "hardware": hardware(tag, host, oversubscribed=oversubscribed),
            "steps_per_epoch": STEPS_PER_EPOCH,
        }
    )
    if status == "failed":
        writer.finish("failed", error=error or "worker 3 exited with code 1")
        return writer.dir
    total = epochs * STEPS_PER_EPOCH
    diverge_epoch = 2 if status == "diverged" else None
    measured = []  # B_simple at each evaluation that has one
    for epoch in range(epochs + 1):
        step = epoch * STEPS_PER_EPOCH
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
                "lr": lr_at(lr_rule, batch, step, total),
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
            "lr": lr_at(lr_rule, batch, s, total),
        }
        for s in range(5, total)
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
        "epochs_to_target": None if steps_to_target is None else steps_to_target / STEPS_PER_EPOCH,
        "grad_noise_scale": {
            "final": measured[-1],
            "mean": sum(measured) / len(measured),
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
                )


def write_comm_bench(
    root: Path,
    tag: str = "box-a",
    peak: float = 4.0,
    world: int = 2,
    collective: str | None = None,
) -> None:
    """A comm-bench result; without ``collective`` its rows have none (as before there were
    other collectives: they read as all_reduce)."""
    factor = 2 * (world - 1) / world if collective in (None, "all_reduce") else (world - 1) / world
    rows = []
    for e in range(10, 25, 2):
        size = 2**e
        busbw = peak * size / (size + 2**18)
        algbw = busbw / factor
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
