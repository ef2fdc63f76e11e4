"""The results schema: the name, unit, type, range and meaning of every run.json key, every
comm-bench key and every CSV column.

The writer (the training loop, the launcher, comm-bench), the loader (``dpsuite.results.load``),
the gate every reader goes through (``dpsuite.results.gate``: it takes each field's type, range
and required-ness from here), the reports, ``dpsuite compare`` and the tests all take names from
here. Units: ``s`` seconds, ``us`` microseconds, ``fraction`` 0..1 (accuracy included: the
report prints it as %), ``bytes``, ``MiB`` (2^20 bytes), ``GiB``, ``samples/s``, ``GB/s`` (1e9
bytes/s), ``TFLOP/s``; ``count`` for integers that count things; empty when unitless.

A field's range follows from its unit unless it declares its own: a measured quantity (a unit of
``MEASURED_UNITS``) is at least 0, a fraction is in [0, 1]; ``signed`` lifts the lower bound (a
difference of two clocks), ``least`` and ``most`` are bounds of the field's own, and ``strict``
leaves ``least`` itself out (a time a rate is divided by is > 0). ``required``
keys must be present (not null) for a record to be checked at all.
"""

from __future__ import annotations

from dataclasses import dataclass

# Units of what a run measures (times, rates, sizes, counts): never below 0 unless a field is
# declared signed. Not ``samples``: B_simple is an estimate (a ratio of two noisy estimates).
MEASURED_UNITS = frozenset(
    {"s", "us", "samples/s", "tokens/s", "count", "bytes", "MiB", "MB", "GiB", "GB/s"}
    | {"TFLOP/s", "FLOP", "epochs"}
)
FRACTION = "fraction"
# No time, rate, size or count a run measures comes near this: a larger one is damage.
MAX_MAGNITUDE = 1e18


@dataclass(frozen=True)
class Field:
    """One key or column. A number's bounds left as None take its unit's (see the module's
    docstring); ``signed`` lifts the unit's lower bound."""

    name: str
    unit: str
    type: str  # float, int, str, bool, mapping, list
    meaning: str
    least: float | None = None
    most: float | None = None
    signed: bool = False  # may be below 0 although its unit is measured (or a fraction)
    strict: bool = False  # ``least`` itself is out of range: > least, not >= least
    required: bool = False
    fields: tuple[Field, ...] = ()  # a mapping's keys, where the schema describes them

    def __post_init__(self) -> None:
        if not self.numeric:  # a list of sizes, or text such as "4,4": no range
            return
        bounded_below = self.unit in MEASURED_UNITS or self.unit == FRACTION
        if self.least is None and bounded_below and not self.signed:
            object.__setattr__(self, "least", 0)
        if self.most is None and self.unit == FRACTION:
            object.__setattr__(self, "most", 1)

    @property
    def measured(self) -> bool:
        """A time, rate, size or count: no value of it comes near ``MAX_MAGNITUDE``."""
        return self.unit in MEASURED_UNITS

    @property
    def numeric(self) -> bool:
        return self.type in ("int", "float")

    @property
    def range(self) -> str:
        """The bounds as text: ``[0, 1]``, ``(0, 1]``, ``>= 1``, ``> 0``, ``<= 1`` or empty."""
        if self.least is not None and self.most is not None:
            return f"{'(' if self.strict else '['}{self.least:g}, {self.most:g}]"
        if self.least is not None:
            return f"{'>' if self.strict else '>='} {self.least:g}"
        return f"<= {self.most:g}" if self.most is not None else ""


# run.json `metrics.grad_noise_scale` (`grad_noise_scale.*` columns of the loaded frame).
GRAD_NOISE_SCALE = (
    Field("final", "samples", "float", "B_simple of the last window of window_steps steps"),
    Field("mean", "samples", "float", "mean of B_simple over the windows"),
    Field("pooled", "samples", "float", "B_simple pooled over every measured step of the run"),
    Field("grad_sq", "", "float", "|G|^2, mean estimate over the run"),
    Field("trace", "", "float", "tr(Sigma), mean estimate over the run"),
    Field("b_small", "count", "float", "batch of one piece (B_small)"),
    Field("b_big", "count", "int", "batch of the averaged gradient (B_big)"),
    Field("estimates", "count", "int", "measured steps"),
    Field("windows", "count", "int", "windows closed"),
    Field("window_steps", "count", "int", "training steps a window spans"),
    Field("every_steps", "count", "int", "measured on every every_steps-th step"),
    Field("method", "", "str", "ranks, micro_batches or halves"),
)

METRICS = (
    Field(
        "samples_per_s",
        "samples/s",
        "float",
        "global_batch / step_time_s, the median step's throughput (a run without outlier_steps: "
        "global samples of the timed steps / the slowest rank's summed step time)",
    ),
    Field("samples_per_s_per_worker", "samples/s", "float", "samples_per_s / workers"),
    Field(
        "tokens_per_s", "tokens/s", "float", "token workloads: samples_per_s x tokens per sample"
    ),
    Field("step_time_s", "s", "float", "median step time (max across ranks per step)"),
    Field(
        "step_time_ci_low_s",
        "s",
        "float",
        "low end of the median step time's 95 % confidence interval (distribution-free, from "
        "order statistics of the timed steps; the fastest step under 6 steps)",
    ),
    Field(
        "step_time_ci_high_s",
        "s",
        "float",
        "high end of that interval (the slowest step under 6 steps)",
    ),
    Field("outlier_steps", "count", "int", "timed steps slower than 3 x step_time_s"),
    Field("step_time_p90_s", "s", "float", "90th percentile step time (nearest rank)"),
    Field("step_time_min_s", "s", "float", "fastest step"),
    Field("timed_steps", "count", "int", "steps timed (warm-up excluded)"),
    Field(
        "data_wait_s",
        "s",
        "float",
        "median time a step was blocked on its next batch (max across ranks): the input pipeline",
    ),
    Field(
        "data_wait_share",
        "fraction",
        "float",
        "share of the timed steps' time spent waiting on data (per step the slowest rank's wait)",
    ),
    Field(
        "first_batch_s",
        "s",
        "float",
        "the first step's wait for its batch (max across ranks): the loader's start-up with it",
    ),
    Field(
        "compute_time_s",
        "s",
        "float",
        "median step time without gradient sync (calibration), without its wait for data",
    ),
    Field(
        "exposed_comm_s",
        "s",
        "float",
        "step_time_s - data_wait_s - compute_time_s: what sync adds to a step",
        signed=True,
    ),
    Field(
        "rank_compute_time_s",
        "s",
        "float",
        "step time without sync of the typical rank (each rank's median, averaged over ranks)",
    ),
    Field(
        "straggler_wait_s",
        "s",
        "float",
        "compute_time_s - rank_compute_time_s: the wait for the slowest rank in a step",
    ),
    Field("comm_fraction", "fraction", "float", "exposed_comm_s / step_time_s", signed=True),
    Field("calibration_steps", "count", "int", "steps timed without sync"),
    Field(
        "comm_time_s", "s", "float", "median time communication was in flight per step", signed=True
    ),
    Field("comm_time_p90_s", "s", "float", "90th percentile of it", signed=True),
    Field(
        "comm_wait_s",
        "s",
        "float",
        "median time a step waited for communication after its last gradient was ready",
        signed=True,
    ),
    Field("comm_sampled_steps", "count", "int", "steps whose communication was timed"),
    Field("comm_samples_rejected", "count", "int", "reducer samples not matching their step"),
    Field(
        "comm_timing",
        "",
        "str",
        "ddp_reducer (DDP's timers, sampled), hook (every step) or clock (an exchange outside DDP)",
    ),
    Field(
        "wire_bytes_per_step",
        "bytes",
        "float",
        "bytes one worker sends per step (an all-reduce of S bytes among n ranks: 2(n-1)/n x S)",
    ),
    Field(
        "server_wire_bytes_per_step", "bytes", "float", "bytes the parameter server sends per step"
    ),
    Field("wire_bytes_total", "bytes", "float", "bytes one worker sent over the run"),
    Field("wire_bytes_histogram", "bytes", "list", "[bytes sent, steps] pairs (a worker's)"),
    Field("collectives_per_step", "count", "float", "communication calls per step"),
    Field("flops_per_sample", "FLOP", "float", "model FLOPs per sample, forward and backward"),
    Field("model_tflops_per_device", "TFLOP/s", "float", "achieved model FLOP/s per device"),
    Field("mfu", "fraction", "float", "model_tflops_per_device / peak_tflops"),
    Field(
        "peak_tflops",
        "TFLOP/s",
        "float",
        "the device's peak at the run's precision: hardware.peak_tflops, or a known GPU's",
    ),
    Field("peak_rss_mib", "MiB", "float", "peak resident memory of a rank (max across ranks)"),
    Field("peak_rss_since_run_start", "", "bool", "false: the process's peak, not the run's"),
    Field("peak_cuda_allocated_mib", "MiB", "float", "peak CUDA memory allocated by PyTorch"),
    Field(
        "estimated_rss_mib",
        "MiB",
        "float",
        "a rank's memory as estimated before the run (see docs/running.md); null: not estimated",
    ),
    Field(
        "profiled_steps",
        "",
        "str",
        "the steps torch.profiler recorded (profile.steps), first-last; null: not profiled",
    ),
    Field(
        "profile_dir",
        "",
        "str",
        "the profiler traces' folder in the run directory (one trace per rank); null: none",
    ),
    Field(
        "param_mib_per_rank", "MiB", "float", "parameters a rank stores (its shard when sharded)"
    ),
    Field("grad_mib_per_rank", "MiB", "float", "gradients a rank stores after backward"),
    Field(
        "optimizer_state_mib_per_rank",
        "MiB",
        "float",
        "optimizer state a rank stores (momentum; its share when sharded)",
    ),
    Field(
        "other_peak_mib",
        "MiB",
        "float",
        "the rest of a rank's peak (resident set on CPU, CUDA allocation on GPU): runtime, "
        "activations, gathered parameters, buffers, data",
        signed=True,
    ),
    Field("steps", "count", "int", "optimizer steps taken"),
    Field("final_train_loss", "", "float", "mean training loss before the last evaluation"),
    Field("final_eval_loss", "", "float", "eval loss at the last evaluation"),
    Field("final_eval_acc", "fraction", "float", "eval accuracy at the last evaluation"),
    Field("best_eval_acc", "fraction", "float", "best eval accuracy over the evaluations"),
    Field(
        "steps_to_target",
        "count",
        "int",
        "first evaluated step with eval_acc >= target_acc (the median of train.target_evals "
        "evaluations, counted at the middle one)",
    ),
    Field("epochs_to_target", "epochs", "float", "the same in epochs"),
    Field("eval_split", "", "str", "the split evaluated during training: validation or test"),
    Field("final_test_loss", "", "float", "the final model's loss on the test split"),
    Field("final_test_acc", "fraction", "float", "the final model's accuracy on the test split"),
    Field(
        "grad_noise_scale",
        "",
        "mapping",
        "gradient noise scale (below); empty when not measured",
        fields=GRAD_NOISE_SCALE,
    ),
)

# Columns `dpsuite.results.load` adds to the run.json keys.
LOADED = (Field("run_dir", "", "str", "the run's directory"),)

# run.json `hardware` (the fingerprint; `hardware.*` columns of the loaded frame).
HARDWARE = (
    Field(
        "tag", "", "str", "your name for the machine (hardware.tag=NAME); groups runs by machine"
    ),
    Field("hostname", "", "str", "host the run's rank 0 ran on"),
    Field("cpu", "", "str", "CPU model"),
    Field("cpu_count", "count", "int", "the machine's logical cores"),
    Field("cpus_usable", "count", "int", "cores the run's process could use (its affinity)"),
    Field("cpus_allocated", "count", "int", "the SLURM job's cores on the node (empty: no SLURM)"),
    Field("accelerator", "", "str", "GPU model, or none"),
    Field("accelerator_count", "count", "int", "GPUs visible to the run"),
    Field("accelerator_memory_gib", "GiB", "float", "memory of one GPU"),
    Field("backend", "", "str", "torch.distributed backend: gloo or nccl"),
    Field("torch", "", "str", "PyTorch version"),
    Field("cuda", "", "str", "CUDA version PyTorch was built with (empty: CPU build)"),
    Field("nccl", "", "str", "NCCL version (empty: none)"),
    Field("python", "", "str", "Python version"),
    Field("os", "", "str", "platform string (kernel, libc)"),
    Field("os_release", "", "str", "operating system release"),
    Field("libc", "", "str", "C library and its version"),
    Field("torch_debug_build", "", "bool", "PyTorch is a debug build (timings then mean little)"),
    Field("cudnn", "", "int", "cuDNN version (empty: none)"),
    Field("gpu_driver", "", "str", "NVIDIA driver version"),
    Field("gpu_models", "", "str", "the GPUs' models"),
    Field("gpu_pcie", "", "str", "each GPU's PCIe link, e.g. gen5 x16 (nvidia-ml-py)"),
    Field("gpu_nvlinks", "count", "str", "each GPU's active NVLinks (nvidia-ml-py)"),
    Field("gpu_topology", "", "str", "the path between every pair of GPUs, as nvidia-smi topo -m"),
    Field("workers_per_host", "count", "int", "ranks of the run on this host"),
    Field("threads_per_worker", "count", "int", "compute threads of each worker process"),
    Field("oversubscribed", "", "bool", "workers x threads exceed the usable cores (contention)"),
    Field("env", "", "mapping", "NCCL_*, GLOO_*, CUDA_*, OMP_*, ... as the command started"),
    Field("machine_id", "", "str", "hash of host, CPU and accelerators: one id per node"),
    Field(
        "kernel_boot_id",
        "",
        "str",
        "the running kernel's boot id: the same on nodes that are namespaces or containers of "
        "one host",
    ),
    Field(
        "load_average",
        "",
        "float",
        "the host's 1-minute load average when the fingerprint was taken (a run's start, a "
        "comm-bench's end; runnable tasks: compare with cpu_count)",
        least=0,
    ),
    Field(
        "nodes",
        "",
        "list",
        "a run across nodes: every host's hostname, machine_id, kernel_boot_id, cpu, cores, "
        "usable cores, accelerator, workers_per_host, network interface and address, and its "
        "ranks",
    ),
    Field(
        "kernels",
        "count",
        "int",
        "comm-bench: the distinct kernels (boot ids) its ranks ran on; fewer than its nodes "
        "where nodes share a host",
        least=1,
    ),
)

# Top-level run.json keys: what the run was (its summary), and its life.
RUN = (
    Field("schema_version", "", "int", "version of this schema the file follows", required=True),
    Field(
        "run_id",
        "",
        "str",
        "readable, stable id: the config's hash (the directory's name)",
        required=True,
    ),
    Field("status", "", "str", "running, complete, diverged or failed", required=True),
    Field("error", "", "str", "why a run failed or diverged (first cause, one line)"),
    Field("workload", "", "str", "model and data", required=True),
    Field(
        "mode",
        "",
        "str",
        "ddp (real processes) or simulated (workers in one process)",
        required=True,
    ),
    Field("workers", "count", "int", "data-parallel workers", least=1, required=True),
    Field("per_worker_batch", "count", "int", "samples per worker per step", least=1),
    Field(
        "global_batch", "count", "int", "samples per step over all workers", least=1, required=True
    ),
    Field("lr_rule", "", "str", "how the LR scales with the global batch", required=True),
    Field("base_lr", "", "float", "LR at base_batch (the small-batch recipe)"),
    Field("base_batch", "count", "int", "batch of the small-batch recipe", least=1),
    Field("lr_exponent", "", "float", "peak_lr = base_lr x (global_batch / base_batch) ** this"),
    Field("peak_lr", "", "float", "LR after warmup, before decay"),
    Field("warmup_epochs", "epochs", "float", "epochs of gradual warmup (0: none)"),
    Field("epochs", "epochs", "int", "epochs budgeted"),
    Field("seed", "", "int", "seed of initialisation and data order", required=True),
    Field("repeat", "", "int", "index of a repeated measurement of the same config"),
    Field("precision", "", "str", "fp32, fp64, bf16 or fp16"),
    Field("threads_per_worker", "count", "int", "compute threads of each worker process"),
    Field("target_acc", "fraction", "float", "eval accuracy counted as reaching the target"),
    Field(
        "target_metric",
        "",
        "str",
        "what steps-to-target counts: eval_acc (higher is better) or eval_loss (lower)",
    ),
    Field("target_loss", "", "float", "eval loss counted as reaching the target (eval_loss)"),
    Field("momentum", "", "float", "SGD momentum"),
    Field("weight_decay", "", "float", "L2 weight decay"),
    Field("schedule", "", "str", "LR decay after warmup"),
    Field("device", "", "str", "cpu or cuda"),
    Field("backend", "", "str", "gloo or nccl"),
    Field("bucket_cap_mb", "MB", "float", "DDP gradient bucket size"),
    Field("sync", "", "str", "synchronization strategy"),
    Field("sync_label", "", "str", "the strategy with its parameters, for plots"),
    Field("lr_rule_own_recipe", "", "bool", "the LR rule brings its own base LR and schedule"),
    Field("lr_rule_order", "", "int", "the LR rule's place in the reports (its registry's order)"),
    Field("sync_order", "", "int", "the strategy's place in the reports (its registry's order)"),
    Field("pid", "", "int", "process that wrote the record (a dead one: the run failed)"),
    Field("host", "", "str", "host of that process"),
    Field("started_at", "", "str", "ISO 8601, UTC (a UTC datetime in `load`'s frame)"),
    Field("finished_at", "", "str", "ISO 8601, UTC (a UTC datetime in `load`'s frame)"),
    Field("heartbeat_at", "", "str", "last update, ISO 8601, UTC"),
    Field("progress", "", "mapping", "step and epoch at the last evaluation"),
    Field("wall_time_s", "s", "float", "the run's wall time, setup included"),
    Field("init_digest", "", "str", "SHA-256 of the initial parameters (same on every rank)"),
    Field(
        "step_protocol",
        "",
        "int",
        "how the loop decides divergence: 2 from the parameters every rank shares (no"
        " collective; local SGD, ZeRO-1, FSDP, param_server: the ranks' losses); absent (1):"
        " the ranks' mean loss, all-reduced at every check",
    ),
    Field("num_params", "count", "int", "model parameters"),
    Field(
        "param_numels",
        "count",
        "list",
        "elements of each trainable parameter tensor, registration order (DDP's buckets)",
    ),
    Field("steps_per_epoch", "count", "int", "optimizer steps per epoch"),
    Field("total_steps", "count", "int", "optimizer steps budgeted"),
    Field("train_samples", "count", "int", "training samples"),
    Field("eval_samples", "count", "int", "evaluation samples"),
    Field(
        "data_form",
        "",
        "str",
        "how the workload gave its data: tensors (in memory) or datasets (read while training)",
    ),
    Field(
        "synthetic_data",
        "",
        "bool",
        "random inputs of a throughput benchmark: accuracy not meaningful (left out of reports)",
    ),
    Field(
        "config",
        "",
        "mapping",
        "the resolved config (every key, see `dpsuite run --help`)",
        required=True,
    ),
    Field("hardware", "", "mapping", "the hardware and software fingerprint", fields=HARDWARE),
    Field("metrics", "", "mapping", "what was measured (below)", fields=METRICS),
)

EPOCHS = (
    Field("epoch", "epochs", "float", "epochs done at this evaluation"),
    Field("step", "count", "int", "optimizer steps done"),
    Field("samples_seen", "count", "int", "training samples seen"),
    Field("lr", "", "float", "LR of the last step taken"),
    Field("train_loss", "", "float", "mean training loss since the previous evaluation"),
    Field("eval_loss", "", "float", "loss on the full eval set"),
    Field("eval_acc", "fraction", "float", "accuracy on the full eval set"),
    Field("wall_s", "s", "float", "wall time since the run started"),
    Field("grad_noise_scale", "samples", "float", "B_simple of the latest window"),
    Field("gns_grad_sq", "", "float", "|G|^2, the latest window's mean estimate"),
    Field("gns_trace", "", "float", "tr(Sigma), the latest window's mean estimate"),
)

STEPS = (
    Field("step", "count", "int", "optimizer step (0-based)"),
    Field("step_time_s", "s", "float", "the step's time, max across ranks"),
    Field("data_wait_s", "s", "float", "time the step was blocked on its batch, max across ranks"),
    Field("comm_s", "s", "float", "communication in flight in the step (empty: not sampled)"),
    Field(
        "comm_wait_s", "s", "float", "time the step waited for communication (empty: not sampled)"
    ),
    Field("lr", "", "float", "the step's LR"),
)

# steps_by_rank.csv: each rank's own times of a bounded sample of timed steps (runs with more
# than one rank; on steps with a communication sample where communication is sampled).
STEPS_BY_RANK = (
    Field("step", "count", "int", "optimizer step (0-based)"),
    Field("rank", "count", "int", "the rank"),
    Field("step_time_s", "s", "float", "the step's time on this rank"),
    Field("data_wait_s", "s", "float", "time this rank was blocked on its batch"),
    Field(
        "compute_s",
        "s",
        "float",
        "this rank's own work: step_time_s - data_wait_s - comm_wait_s (empty: not sampled)",
    ),
    Field("comm_s", "s", "float", "this rank's communication in flight (empty: not sampled)"),
    Field(
        "comm_wait_s",
        "s",
        "float",
        "time this rank waited for communication after its last gradient (empty: not sampled)",
    ),
    Field(
        "peer_wait_s",
        "s",
        "float",
        "comm_wait_s minus the step's least comm_wait_s over ranks: the wait for slower ranks",
    ),
)

# Where and when a benchmark ran: the last fields of every benchmark's metadata.
BENCH_PROVENANCE = (
    Field(
        "hardware",
        "",
        "mapping",
        "the hardware and software fingerprint (as run.json's)",
        fields=HARDWARE,
    ),
    Field("started_at", "", "str", "ISO 8601, UTC"),
    Field("finished_at", "", "str", "ISO 8601, UTC"),
)

# comm_bench.json of a `dpsuite comm-bench` result (RESULTS_DIR/comm_bench/<bench_id>/).
COMM_BENCH_META = (
    Field("schema_version", "", "int", "version of the results schema the file follows"),
    Field("bench_id", "", "str", "the result's name (its directory's): machine, backend, time"),
    Field("collectives", "", "list", "the collectives measured, in order"),
    Field("op", "", "str", "the collective of results written before there were others"),
    Field("reduce_op", "", "str", "the reduction of all_reduce and reduce_scatter: sum"),
    Field("broadcast_root", "", "int", "the rank broadcast sends from", least=0),
    Field("world_size", "count", "int", "ranks", least=1),
    Field("backend", "", "str", "torch.distributed backend: gloo or nccl"),
    Field("device", "", "str", "cpu or cuda"),
    Field("dtype", "", "str", "element type: fp32 or bf16"),
    Field("warmup", "count", "int", "untimed iterations before the timed ones, per size"),
    Field("iters", "count", "int", "timed iterations per size", least=1),
    Field("sizes", "bytes", "list", "the message sizes measured"),
    Field("time_definition", "", "str", "how a row's time_us is taken"),
    Field("busbw_factors", "", "mapping", "busbw / algbw of each collective at world_size"),
    Field("busbw_factor", "", "float", "busbw / algbw of results written before", least=0),
    Field("threads_per_worker", "count", "int", "compute threads of each rank"),
    Field("errors_total", "count", "int", "wrong values over every row (0: all correct)"),
    Field("config", "", "mapping", "the benchmark's settings as given"),
    *BENCH_PROVENANCE,
)

# comm_bench.csv: one row per collective and message size.
COMM_BENCH_ROWS = (
    Field(
        "collective", "", "str", "all_reduce, all_gather, ... (empty in older files: all_reduce)"
    ),
    Field(
        "size_bytes",
        "bytes",
        "int",
        "S, the message size (nccl-tests' total)",
        least=1,
        required=True,
    ),
    Field("count", "count", "int", "elements of the message", least=1, required=True),
    Field("dtype", "", "str", "element type", required=True),
    Field(
        "time_us",
        "us",
        "float",
        "mean per collective over iters, max across ranks",
        strict=True,
        required=True,
    ),
    Field("algbw_GBps", "GB/s", "float", "S / time", strict=True, required=True),
    Field("busbw_GBps", "GB/s", "float", "algbw x the collective's busbw factor", required=True),
    Field("errors", "count", "int", "wrong values in the result, summed over ranks", required=True),
)

# input_bench.json of a `dpsuite input-bench` result (RESULTS_DIR/input_bench/<bench_id>/).
INPUT_BENCH_META = (
    Field("schema_version", "", "int", "version of the results schema the file follows"),
    Field("bench_id", "", "str", "the result's name (its directory's): machine, workload, time"),
    Field("workload", "", "str", "the workload whose train pipeline was measured", required=True),
    Field(
        "pipeline",
        "",
        "str",
        "datasets (a DataLoader per rank) or in memory (tensors: the index gather is measured)",
        required=True,
    ),
    Field("device", "", "str", "where each batch was moved: cpu or cuda"),
    Field("batches", "count", "int", "timed batches per rank and point", least=1),
    Field("warmup", "count", "int", "untimed batches per rank after the first"),
    Field("threads_per_worker", "count", "int", "compute threads of each rank"),
    Field("rank_processes", "", "str", "how the ranks of a point were run"),
    Field("overrides", "", "list", "the run config overrides the pipeline was built from"),
    *BENCH_PROVENANCE,
)

# input_bench.csv: one row per rank count and loader_workers value.
INPUT_BENCH_ROWS = (
    Field("ranks", "count", "int", "processes reading their share at once", least=1, required=True),
    Field("loader_workers", "count", "int", "DataLoader workers per rank", required=True),
    Field("per_worker_batch", "count", "int", "samples per batch", least=1, required=True),
    Field(
        "samples_per_s",
        "samples/s",
        "float",
        "all ranks together: ranks x batches x batch / the slowest rank's time",
        strict=True,
        required=True,
    ),
    Field(
        "samples_per_s_per_rank",
        "samples/s",
        "float",
        "the slowest rank's rate: what bounds a training step",
        strict=True,
        required=True,
    ),
    Field("batch_time_s", "s", "float", "mean time per batch, slowest rank", required=True),
    Field("first_batch_s", "s", "float", "until the first batch (loader workers start), max"),
)

# Columns added after the first results were written: older files load with them empty.
OPTIONAL_EPOCH_COLUMNS = ("grad_noise_scale", "gns_grad_sq", "gns_trace")
OPTIONAL_STEP_COLUMNS = ("data_wait_s",)

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
    "data_wait_s",
    "data_wait_share",
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


def numeric(fields: tuple[Field, ...]) -> list[str]:
    """The names of the fields that hold numbers."""
    return [f.name for f in fields if f.numeric]


SECTIONS = (
    ("run.json", RUN),
    ("run.json metrics", METRICS),
    ("run.json metrics.grad_noise_scale", GRAD_NOISE_SCALE),
    ("run.json hardware", HARDWARE),
    ("epochs.csv", EPOCHS),
    ("steps.csv", STEPS),
    ("steps_by_rank.csv", STEPS_BY_RANK),
    ("comm_bench.json", COMM_BENCH_META),
    ("comm_bench.csv", COMM_BENCH_ROWS),
    ("input_bench.json", INPUT_BENCH_META),
    ("input_bench.csv", INPUT_BENCH_ROWS),
)
MARKDOWN_INTRO = (
    "# Results schema",
    "",
    "Every key and column of the results files, as `dpsuite schema` prints it from",
    "`suite/results/schema.py` (regenerate: `dpsuite schema > docs/results-schema.md`). Every",
    "reader's gate leaves out a run.json or comm-bench result that lacks a required key, or",
    "whose value is not of its type or outside its range. A range follows from the unit unless",
    "the field declares its own: measured times, rates, sizes and counts are >= 0 (differences",
    "of two clocks may be negative) and below 1e18, fractions are in [0, 1]; a comm-bench",
    "time and its algbw are > 0 (the fit divides by them).",
    "epochs.csv and steps.csv are described here, not gated.",
    "",
)


def markdown() -> str:
    """Every key and column as Markdown tables (``dpsuite schema``, docs/results-schema.md)."""
    parts = list(MARKDOWN_INTRO)
    header = "| name | unit | type | range | required | meaning |"
    for title, section in SECTIONS:
        parts += [f"## {title}", "", header, "|---|---|---|---|---|---|"]
        parts += [
            f"| `{f.name}` | {f.unit} | {f.type} | {f.range} | {'yes' if f.required else ''} "
            f"| {f.meaning} |"
            for f in section
        ]
        parts.append("")
    return "\n".join(parts).rstrip("\n")


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
