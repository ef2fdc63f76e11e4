"""The results schema: the name, unit, type and meaning of every run.json key and CSV column.

The writer (the training loop, the launcher), the loader (``dpsuite.results.load``), the reports,
``dpsuite compare`` and the tests all take names from here. Units: ``s`` seconds, ``fraction``
0..1 (accuracy included: the report prints it as %), ``bytes``, ``MiB`` (2^20 bytes),
``samples/s``, ``TFLOP/s``; ``count`` for integers that count things; empty when unitless.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Field:
    name: str
    unit: str
    type: str  # float, int, str, bool, mapping, list
    meaning: str


def _fields(*rows: tuple[str, str, str, str]) -> tuple[Field, ...]:
    return tuple(Field(*row) for row in rows)


# Top-level run.json keys: what the run was (its summary), and its life.
RUN = _fields(
    ("schema_version", "", "int", "version of this schema the file follows"),
    ("run_id", "", "str", "readable, stable id: the config's hash (the directory's name)"),
    ("status", "", "str", "running, complete, diverged or failed"),
    ("error", "", "str", "why a run failed or diverged (first cause, one line)"),
    ("workload", "", "str", "model and data"),
    ("mode", "", "str", "ddp (real processes) or simulated (workers in one process)"),
    ("workers", "count", "int", "data-parallel workers"),
    ("per_worker_batch", "count", "int", "samples per worker per step"),
    ("global_batch", "count", "int", "samples per step over all workers"),
    ("lr_rule", "", "str", "how the LR scales with the global batch"),
    ("base_lr", "", "float", "LR at base_batch (the small-batch recipe)"),
    ("base_batch", "count", "int", "batch of the small-batch recipe"),
    ("lr_exponent", "", "float", "peak_lr = base_lr x (global_batch / base_batch) ** this"),
    ("peak_lr", "", "float", "LR after warmup, before decay"),
    ("warmup_epochs", "epochs", "float", "epochs of gradual warmup (0: none)"),
    ("epochs", "epochs", "int", "epochs budgeted"),
    ("seed", "", "int", "seed of initialisation and data order"),
    ("repeat", "", "int", "index of a repeated measurement of the same config"),
    ("precision", "", "str", "fp32, fp64, bf16 or fp16"),
    ("threads_per_worker", "count", "int", "compute threads of each worker process"),
    ("target_acc", "fraction", "float", "eval accuracy counted as reaching the target"),
    ("momentum", "", "float", "SGD momentum"),
    ("weight_decay", "", "float", "L2 weight decay"),
    ("schedule", "", "str", "LR decay after warmup"),
    ("device", "", "str", "cpu or cuda"),
    ("backend", "", "str", "gloo or nccl"),
    ("bucket_cap_mb", "MB", "float", "DDP gradient bucket size"),
    ("sync", "", "str", "synchronization strategy"),
    ("sync_label", "", "str", "the strategy with its parameters, for plots"),
    ("lr_rule_own_recipe", "", "bool", "the LR rule brings its own base LR and schedule"),
    ("lr_rule_order", "", "int", "the LR rule's place in the reports (its registry's order)"),
    ("sync_order", "", "int", "the strategy's place in the reports (its registry's order)"),
    ("pid", "", "int", "process that wrote the record (a dead one: the run failed)"),
    ("host", "", "str", "host of that process"),
    ("started_at", "", "str", "ISO 8601, UTC (a UTC datetime in `load`'s frame)"),
    ("finished_at", "", "str", "ISO 8601, UTC (a UTC datetime in `load`'s frame)"),
    ("heartbeat_at", "", "str", "last update, ISO 8601, UTC"),
    ("progress", "", "mapping", "step and epoch at the last evaluation"),
    ("wall_time_s", "s", "float", "the run's wall time, setup included"),
    ("init_digest", "", "str", "SHA-256 of the initial parameters (same on every rank)"),
    ("num_params", "count", "int", "model parameters"),
    (
        "param_numels",
        "count",
        "list",
        "elements of each trainable parameter tensor, registration order (DDP's buckets)",
    ),
    ("steps_per_epoch", "count", "int", "optimizer steps per epoch"),
    ("total_steps", "count", "int", "optimizer steps budgeted"),
    ("train_samples", "count", "int", "training samples"),
    ("eval_samples", "count", "int", "evaluation samples"),
    (
        "synthetic_data",
        "",
        "bool",
        "random inputs of a throughput benchmark: accuracy not meaningful (left out of reports)",
    ),
    ("config", "", "mapping", "the resolved config (every key, see `dpsuite run --help`)"),
    ("hardware", "", "mapping", "the hardware and software fingerprint"),
    ("metrics", "", "mapping", "what was measured (below)"),
)

METRICS = _fields(
    (
        "samples_per_s",
        "samples/s",
        "float",
        "global samples of the timed steps / the slowest rank's summed step time",
    ),
    ("samples_per_s_per_worker", "samples/s", "float", "samples_per_s / workers"),
    ("tokens_per_s", "tokens/s", "float", "token workloads: samples_per_s x tokens per sample"),
    ("step_time_s", "s", "float", "median step time (max across ranks per step)"),
    ("step_time_p90_s", "s", "float", "90th percentile step time (nearest rank)"),
    ("step_time_min_s", "s", "float", "fastest step"),
    ("timed_steps", "count", "int", "steps timed (warm-up excluded)"),
    ("compute_time_s", "s", "float", "median step time without gradient sync (calibration)"),
    ("exposed_comm_s", "s", "float", "step_time_s - compute_time_s: what sync adds to a step"),
    (
        "rank_compute_time_s",
        "s",
        "float",
        "step time without sync of the typical rank (each rank's median, averaged over ranks)",
    ),
    (
        "straggler_wait_s",
        "s",
        "float",
        "compute_time_s - rank_compute_time_s: the wait for the slowest rank in a step",
    ),
    ("comm_fraction", "fraction", "float", "exposed_comm_s / step_time_s"),
    ("calibration_steps", "count", "int", "steps timed without sync"),
    ("comm_time_s", "s", "float", "median time communication was in flight per step"),
    ("comm_time_p90_s", "s", "float", "90th percentile of it"),
    (
        "comm_wait_s",
        "s",
        "float",
        "median time a step waited for communication after its last gradient was ready",
    ),
    ("comm_sampled_steps", "count", "int", "steps whose communication was timed"),
    ("comm_samples_rejected", "count", "int", "reducer samples not matching their step"),
    (
        "comm_timing",
        "",
        "str",
        "ddp_reducer (DDP's timers, sampled), hook (every step) or clock (an exchange outside DDP)",
    ),
    (
        "wire_bytes_per_step",
        "bytes",
        "float",
        "bytes one worker sends per step (an all-reduce of S bytes among n ranks: 2(n-1)/n x S)",
    ),
    ("server_wire_bytes_per_step", "bytes", "float", "bytes the parameter server sends per step"),
    ("wire_bytes_total", "bytes", "float", "bytes one worker sent over the run"),
    ("wire_bytes_histogram", "bytes", "list", "[bytes sent, steps] pairs (a worker's)"),
    ("collectives_per_step", "count", "float", "communication calls per step"),
    ("flops_per_sample", "FLOP", "float", "model FLOPs per sample, forward and backward"),
    ("model_tflops_per_device", "TFLOP/s", "float", "achieved model FLOP/s per device"),
    ("mfu", "fraction", "float", "model_tflops_per_device / peak_tflops"),
    (
        "peak_tflops",
        "TFLOP/s",
        "float",
        "the device's peak at the run's precision: hardware.peak_tflops, or a known GPU's",
    ),
    ("peak_rss_mib", "MiB", "float", "peak resident memory of a rank (max across ranks)"),
    ("peak_rss_since_run_start", "", "bool", "false: the process's peak, not the run's"),
    ("peak_cuda_allocated_mib", "MiB", "float", "peak CUDA memory allocated by PyTorch"),
    ("steps", "count", "int", "optimizer steps taken"),
    ("final_train_loss", "", "float", "mean training loss before the last evaluation"),
    ("final_eval_loss", "", "float", "eval loss at the last evaluation"),
    ("final_eval_acc", "fraction", "float", "eval accuracy at the last evaluation"),
    ("best_eval_acc", "fraction", "float", "best eval accuracy over the evaluations"),
    (
        "steps_to_target",
        "count",
        "int",
        "first evaluated step with eval_acc >= target_acc (the median of train.target_evals "
        "evaluations, counted at the middle one)",
    ),
    ("epochs_to_target", "epochs", "float", "the same in epochs"),
    ("eval_split", "", "str", "the split evaluated during training: validation or test"),
    ("final_test_loss", "", "float", "the final model's loss on the test split"),
    ("final_test_acc", "fraction", "float", "the final model's accuracy on the test split"),
    ("grad_noise_scale", "", "mapping", "gradient noise scale (below); empty when not measured"),
)

GRAD_NOISE_SCALE = _fields(
    ("final", "samples", "float", "B_simple of the last window of window_steps steps"),
    ("mean", "samples", "float", "mean of B_simple over the windows"),
    ("pooled", "samples", "float", "B_simple pooled over every measured step of the run"),
    ("grad_sq", "", "float", "|G|^2, mean estimate over the run"),
    ("trace", "", "float", "tr(Sigma), mean estimate over the run"),
    ("b_small", "count", "float", "batch of one piece (B_small)"),
    ("b_big", "count", "int", "batch of the averaged gradient (B_big)"),
    ("estimates", "count", "int", "measured steps"),
    ("windows", "count", "int", "windows closed"),
    ("window_steps", "count", "int", "training steps a window spans"),
    ("every_steps", "count", "int", "measured on every every_steps-th step"),
    ("method", "", "str", "ranks, micro_batches or halves"),
)

# Columns `dpsuite.results.load` adds to the run.json keys.
LOADED = _fields(("run_dir", "", "str", "the run's directory"))

# run.json `hardware` (the fingerprint; `hardware.*` columns of the loaded frame).
HARDWARE = _fields(
    ("tag", "", "str", "your name for the machine (hardware.tag=NAME); groups runs by machine"),
    ("hostname", "", "str", "host the run's rank 0 ran on"),
    ("cpu", "", "str", "CPU model"),
    ("cpu_count", "count", "int", "the machine's logical cores"),
    ("cpus_usable", "count", "int", "cores the run's process could use (its affinity)"),
    ("cpus_allocated", "count", "int", "the SLURM job's cores on the node (empty: no SLURM)"),
    ("accelerator", "", "str", "GPU model, or none"),
    ("accelerator_count", "count", "int", "GPUs visible to the run"),
    ("accelerator_memory_gib", "GiB", "float", "memory of one GPU"),
    ("backend", "", "str", "torch.distributed backend: gloo or nccl"),
    ("torch", "", "str", "PyTorch version"),
    ("cuda", "", "str", "CUDA version PyTorch was built with (empty: CPU build)"),
    ("nccl", "", "str", "NCCL version (empty: none)"),
    ("python", "", "str", "Python version"),
    ("os", "", "str", "platform string (kernel, libc)"),
    ("os_release", "", "str", "operating system release"),
    ("libc", "", "str", "C library and its version"),
    ("torch_debug_build", "", "bool", "PyTorch is a debug build (timings then mean little)"),
    ("cudnn", "", "int", "cuDNN version (empty: none)"),
    ("gpu_driver", "", "str", "NVIDIA driver version"),
    ("gpu_models", "", "str", "the GPUs' models"),
    ("gpu_pcie", "", "str", "each GPU's PCIe link, e.g. gen5 x16 (nvidia-ml-py)"),
    ("gpu_nvlinks", "count", "str", "each GPU's active NVLinks (nvidia-ml-py)"),
    ("gpu_topology", "", "str", "the path between every pair of GPUs, as nvidia-smi topo -m"),
    ("workers_per_host", "count", "int", "ranks of the run on this host"),
    ("threads_per_worker", "count", "int", "compute threads of each worker process"),
    ("oversubscribed", "", "bool", "workers x threads exceed the usable cores (contention)"),
    ("env", "", "mapping", "NCCL_*, GLOO_*, CUDA_*, OMP_*, ... as the command started"),
    ("machine_id", "", "str", "hash of host, CPU and accelerators: one id per node"),
)

EPOCHS = _fields(
    ("epoch", "epochs", "float", "epochs done at this evaluation"),
    ("step", "count", "int", "optimizer steps done"),
    ("samples_seen", "count", "int", "training samples seen"),
    ("lr", "", "float", "LR of the last step taken"),
    ("train_loss", "", "float", "mean training loss since the previous evaluation"),
    ("eval_loss", "", "float", "loss on the full eval set"),
    ("eval_acc", "fraction", "float", "accuracy on the full eval set"),
    ("wall_s", "s", "float", "wall time since the run started"),
    ("grad_noise_scale", "samples", "float", "B_simple of the latest window"),
    ("gns_grad_sq", "", "float", "|G|^2, the latest window's mean estimate"),
    ("gns_trace", "", "float", "tr(Sigma), the latest window's mean estimate"),
)

STEPS = _fields(
    ("step", "count", "int", "optimizer step (0-based)"),
    ("step_time_s", "s", "float", "the step's time, max across ranks"),
    ("comm_s", "s", "float", "communication in flight in the step (empty: not sampled)"),
    ("comm_wait_s", "s", "float", "time the step waited for communication (empty: not sampled)"),
    ("lr", "", "float", "the step's LR"),
)

# Columns added after the first results were written: older files load with them empty.
OPTIONAL_EPOCH_COLUMNS = ("grad_noise_scale", "gns_grad_sq", "gns_trace")

# What makes two runs on different machines "the same configuration" (dpsuite compare).
COMPARE_KEY = ("workload", "workers", "per_worker_batch", "lr_rule", "precision", "sync_label")

# The columns of a report's summary.csv, in order (columns of `dpsuite.results.load`'s frame).
SUMMARY_COLUMNS = (
    "run_id",
    "status",
    "error",
    "workload",
    "mode",
    "workers",
    "per_worker_batch",
    "global_batch",
    "lr_rule",
    "sync",
    "sync_label",
    "base_lr",
    "base_batch",
    "lr_exponent",
    "peak_lr",
    "warmup_epochs",
    "epochs",
    "seed",
    "repeat",
    "precision",
    "device",
    "target_acc",
    "schedule",
    "train_samples",
    "samples_per_s",
    "samples_per_s_per_worker",
    "tokens_per_s",
    "step_time_s",
    "step_time_p90_s",
    "compute_time_s",
    "comm_time_s",
    "comm_wait_s",
    "exposed_comm_s",
    "comm_fraction",
    "wire_bytes_per_step",
    "server_wire_bytes_per_step",
    "collectives_per_step",
    "flops_per_sample",
    "model_tflops_per_device",
    "mfu",
    "peak_rss_mib",
    "peak_cuda_allocated_mib",
    "steps",
    "final_train_loss",
    "final_eval_loss",
    "final_eval_acc",
    "best_eval_acc",
    "steps_to_target",
    "epochs_to_target",
    "grad_noise_scale.final",
    "grad_noise_scale.mean",
    "grad_noise_scale.b_small",
    "grad_noise_scale.b_big",
    "grad_noise_scale.estimates",
    "wall_time_s",
    "hardware.tag",
    "hardware.machine_id",
    "hardware.hostname",
    "hardware.cpu",
    "hardware.cpu_count",
    "hardware.accelerator",
    "hardware.accelerator_count",
    "hardware.backend",
    "hardware.torch",
    "hardware.oversubscribed",
    "run_dir",
)


def names(fields: tuple[Field, ...]) -> list[str]:
    return [f.name for f in fields]


def lookup(column: str) -> Field | None:
    """The field of a column of ``dpsuite.results.load``'s frame (run key or metric, with a
    ``grad_noise_scale.`` or ``hardware.`` prefix where it has one)."""
    if column.startswith("grad_noise_scale."):
        return next((f for f in GRAD_NOISE_SCALE if f.name == column.split(".", 1)[1]), None)
    if column.startswith("hardware.env."):
        return Field(column, "", "str", "environment variable as the command started")
    if column.startswith("hardware."):
        return next((f for f in HARDWARE if f.name == column.split(".", 1)[1]), None)
    return next((f for f in (*RUN, *METRICS, *LOADED) if f.name == column), None)


def markdown() -> str:
    """Every key and column as Markdown tables (``dpsuite schema``)."""
    parts = []
    sections = (
        ("run.json", RUN),
        ("run.json metrics", METRICS),
        ("run.json metrics.grad_noise_scale", GRAD_NOISE_SCALE),
        ("run.json hardware", HARDWARE),
        ("epochs.csv", EPOCHS),
        ("steps.csv", STEPS),
    )
    for title, section in sections:
        parts += [f"### {title}", "", "| name | unit | type | meaning |", "|---|---|---|---|"]
        parts += [f"| `{f.name}` | {f.unit} | {f.type} | {f.meaning} |" for f in section]
        parts.append("")
    return "\n".join(parts)


TIMESTAMP_COLUMNS = ("started_at", "finished_at", "heartbeat_at")


def column_units(columns) -> dict[str, dict[str, str]]:
    """``{"units": {column: unit}, "meanings": {column: meaning}}`` for the columns of
    ``dpsuite.results.load``'s frame that the schema describes (``config.*`` keys are described
    by ``dpsuite run --help``)."""
    known = {c: f for c in columns if (f := lookup(str(c))) is not None}
    return {
        "units": {c: f.unit for c, f in known.items() if f.unit},
        "meanings": {c: f.meaning for c, f in known.items()},
    }
