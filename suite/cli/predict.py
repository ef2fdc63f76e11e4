"""`dpsuite predict`: its flags, each value checked into one clear error, and the hand-off to
the scaling model (fitted to a results tree, planned on a hardware profile, or the published
table)."""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import replace
from pathlib import Path

from dpsuite import results
from dpsuite.analysis.scaling import (
    fit,
    fit_counts,
    model,
    options,
    output,
    plan,
    profiles,
    published,
)
from dpsuite.analysis.scaling.allreduce_cost import (
    ALGORITHM_NAMES,
    BACKENDS,
    LIBRARIES,
    parse_version,
)
from dpsuite.analysis.scaling.fit import Fit
from dpsuite.analysis.scaling.fit_counts import HeldOut
from dpsuite.analysis.scaling.options import ModelOptions
from dpsuite.analysis.scaling.profiles import Profile
from dpsuite.analysis.scaling.tensor_file import dump_tensors, load_tensors
from dpsuite.cli import predict_bounds, predict_input, predict_sync
from dpsuite.cli.args import ArgParser, finite
from dpsuite.cli.predict_comm_bench import measured_links
from dpsuite.cli.predict_tensors import dumped_tensors
from dpsuite.errors import UserError


def parser() -> ArgParser:
    p = ArgParser(
        prog="dpsuite predict",
        description="The scaling model: fitted to a results tree (its workers=1 runs and "
        "comm-bench) and validated against its multi-worker runs, or a workload planned on a "
        "hardware profile. Predicts step time, throughput and efficiency up to --max-workers.",
    )
    p.add_argument("results_dir", nargs="?", help="results tree with runs and comm-bench")
    p.add_argument("--batch", type=int, default=32, help="per-worker batch to predict at")
    p.add_argument("--max-workers", type=int, default=4096)
    p.add_argument("--out", help="write predictions.csv, validation.csv, models.csv here")
    p.add_argument(
        "--profile",
        help=f"hardware profile: {', '.join(profiles.profile_names())}, or a YAML file. With "
        "RESULTS_DIR alone it supplies what was not measured (GPUs per node, the network)",
    )
    p.add_argument(
        "--published",
        nargs="?",
        const=str(published.PUBLISHED),
        metavar="FILE",
        help="the model against published multi-GPU scaling (Horovod, Goyal et al., NVIDIA "
        "DeepLearningExamples), or against your own table FILE (its format: "
        "docs/scaling-model.md)",
    )
    p.add_argument(
        "--dump-tensors",
        nargs="+",
        metavar="SOURCE",
        help="print a workload's gradient tensors as the file --tensors reads: from a run "
        "(run.json or its directory) or workload=NAME [key=value ...] (its config keys)",
    )
    _add_planning(p.add_argument_group("planning a workload on --profile's hardware"))
    _add_model_terms(p.add_argument_group("the model's terms"))
    return p


def _add_planning(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--workload", help="its parameter and FLOP counts from RESULTS_DIR's runs")
    group.add_argument("--params", type=finite, help="model parameters")
    group.add_argument("--flops-per-sample", type=finite, help="forward + backward FLOPs")
    group.add_argument("--samples-per-s", type=finite, help="measured single-GPU throughput")
    group.add_argument("--precision", help="peak TFLOP/s of the profile at this precision")
    group.add_argument("--tflops", type=finite, help="peak TFLOP/s per GPU (overrides the profile)")
    group.add_argument("--mfu", type=finite, default=0.4, help="fraction of peak achieved (0.4)")
    group.add_argument("--bucket-mb", type=finite, default=model.DEFAULT_BUCKET_MB)
    group.add_argument(
        "--tensors",
        metavar="FILE",
        help="the gradient tensors (elements of each, in registration order) as --dump-tensors "
        "writes them: they replace the runs' or the workload's",
    )
    group.add_argument(
        "--grad-accum",
        type=int,
        default=1,
        help="micro-batches of --batch per step, gradients all-reduced once (default 1)",
    )
    group.add_argument(
        "--no-overlap",
        action="store_true",
        help="all-reduce after the backward pass, not bucket by bucket during it",
    )
    predict_sync.add_flags(group)


def _add_model_terms(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--workers",
        help="worker counts to predict at, e.g. 8,16,96 (default: powers of two from "
        "--baseline-workers)",
    )
    group.add_argument(
        "--baseline-workers",
        type=int,
        default=1,
        help="efficiency relative to this many workers (papers often report from one node)",
    )
    group.add_argument(
        "--grad-dtype",
        choices=sorted(model.GRAD_DTYPE_BYTES),
        help="gradient dtype on the wire (default fp32; bf16/fp16 with a compression hook)",
    )
    group.add_argument("--backend", choices=BACKENDS, help="nccl (default on a profile) or gloo")
    group.add_argument("--nccl-version", help="NCCL's version: trees from 2.4 (default 2.8.4)")
    group.add_argument(
        "--library",
        choices=LIBRARIES,
        help="torch-ddp (default), horovod (adds hierarchical), caffe2 (gloo halving-doubling)",
    )
    group.add_argument(
        "--algorithms",
        help=f"restrict the all-reduce to these, e.g. ring ({', '.join(ALGORITHM_NAMES)})",
    )
    group.add_argument(
        "--nccl-channels",
        type=int,
        help="NCCL's channels on a node of --profile (one SM each while an all-reduce runs; "
        "default: the profile's nccl_channels); planning on a profile only",
    )
    _add_measured_terms(group)


def _add_measured_terms(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--measured-node-efficiency",
        type=float,
        help="a measured efficiency of one full node (0-1]: its loss beyond the model's terms is "
        "carried to larger worker counts as a per-step overhead",
    )
    group.add_argument(
        "--node-workers", type=int, help="workers of that measurement (default: GPUs per node)"
    )
    group.add_argument(
        "--node-efficiency-from",
        metavar="RESULTS_DIR",
        help="take that efficiency from the runs of one node in a results tree (the most "
        "workers on one host, same per-worker batch, not oversubscribed)",
    )
    group.add_argument(
        "--comm-bench",
        metavar="RESULTS_DIR",
        help="the network as that results tree's comm-bench measured it (on one node, and "
        "across nodes where it ran across them): each all-reduce read off the bus bandwidth "
        "measured at its message size, instead of the profile's datasheet rates; planning on "
        "a profile",
    )
    group.add_argument(
        "--input-samples-per-s",
        type=float,
        help="a measured rate at which one node's host loads samples (decode, augment; e.g. "
        "your data loader benchmarked alone): a node's throughput is at most this",
    )
    group.add_argument(
        "--input-rate-from",
        metavar="RESULTS_DIR",
        help="take that rate from `dpsuite input-bench` results (the best loader workers at "
        "the most ranks measured; read from RESULTS_DIR itself when it holds any)",
    )


def run(args: list[str]) -> int:
    """`dpsuite predict ARGS`: the exit status."""
    p = parser()
    a = p.parse_args(args)
    if a.dump_tensors is not None:
        predict_bounds.only_flag(a, p, "dump_tensors")
        print(dump_tensors(dumped_tensors(a.dump_tensors)), end="")
        return 0
    opts = _checked(a)
    if a.published:
        predict_bounds.published_extras(a, p)
        path = Path(a.published)
        table = published.published_table(path)
        print(output.format_published(table))
        print()
        print(output.format_published_skill(table, path))
        return 0
    workers = _worker_counts(a.workers, a.max_workers, a.baseline_workers)
    if a.out:
        predict_bounds.check_out(a.out)
    if a.results_dir is not None and not Path(a.results_dir).is_dir():
        raise UserError(f"results directory not found: {a.results_dir}")
    checked = _predicted(a, opts)
    fits = [one for one, _ in checked]
    if a.out:
        predict_bounds.make_out(a.out)
    for one, check in checked:
        print(output.format_fit(one, a.batch, workers, a.baseline_workers))
        for line in fit_counts.format_held_out(one, check):
            print(line)
    if a.out:
        _write(fits, a, workers)
        print(f"wrote {a.out}/predictions.csv, validation.csv, models.csv")
    return 0


def _predicted(a: argparse.Namespace, opts: ModelOptions) -> list[tuple[Fit, HeldOut | None]]:
    """The models to predict with, planned or fitted, the options applied; a fitted one's
    synchronisation term fitted to every count its runs measured, with its leave-last-out."""
    profile = profiles.load_profile(a.profile) if a.profile else None
    planning = a.workload or a.params is not None or (opts.tensors and a.results_dir is None)
    if planning:
        fits = [_planned(a, opts, profile)]
    elif a.results_dir is None:
        raise UserError("give a results directory, or --profile with --workload or --params")
    elif a.comm_bench is not None:
        raise UserError("--comm-bench goes with planning on a profile (--workload or --params)")
    elif a.nccl_channels is not None:
        raise UserError("--nccl-channels goes with planning on a profile (--workload or --params)")
    else:
        fits = _fitted(a, opts, profile)
    fits = predict_input.with_input_rates([options.step_shape(one, opts) for one in fits], a, opts)
    for one in fits:
        predict_bounds.check_step(one.model.compute.step_s(a.batch), a.batch, one.workload)
    if planning:
        return [(one, None) for one in fits]
    return fit_counts.fit_every_count(fits, results.load(a.results_dir))


def _checked(a: argparse.Namespace) -> ModelOptions:
    """What can be checked before anything is read, each flag on its own; the model's options
    the flags give."""
    predict_bounds.check_numbers(a)
    predict_sync.check(a)
    if a.nccl_channels is not None and (a.profile is None or a.published):
        raise UserError("--nccl-channels goes with --profile (planning a workload on it)")
    if a.nccl_version is not None:
        try:
            parse_version(a.nccl_version)
        except ValueError as exc:
            raise UserError(f"--nccl-version: {exc}") from None
    opts = _model_options(a)
    if opts.tensors is not None and a.params is not None:
        raise UserError("give --tensors or --params, not both (the tensors give the parameters)")
    if a.measured_node_efficiency is not None and a.node_efficiency_from is not None:
        raise UserError("give --measured-node-efficiency or --node-efficiency-from, not both")
    if a.node_efficiency_from is None:
        options.overheads(opts, gpus_per_node=2)  # the value's range; its node is known later
    predict_input.check(a)
    rate = a.input_samples_per_s
    if rate is not None and not (math.isfinite(rate) and rate > 0):
        raise UserError(f"--input-samples-per-s must be a finite number > 0, got {rate:g}")
    if rate is not None and a.published:
        raise UserError(
            "--input-samples-per-s goes with a prediction, not --published (no publication "
            "gives its host's input rate)"
        )
    return opts


def _model_options(a: argparse.Namespace) -> ModelOptions:
    return ModelOptions(
        grad_dtype=a.grad_dtype,
        backend=a.backend,
        nccl_version=a.nccl_version,
        library=a.library,
        algorithms=_algorithm_names(a.algorithms),
        nccl_channels=a.nccl_channels,
        measured_node_efficiency=a.measured_node_efficiency,
        node_workers=a.node_workers,
        node_efficiency_from=a.node_efficiency_from,
        input_samples_per_s=a.input_samples_per_s,
        tensors=load_tensors(a.tensors) if a.tensors else None,
        grad_accum=a.grad_accum,
        overlap=not a.no_overlap,
    )


def _algorithm_names(text: str | None) -> tuple[str, ...]:
    """The algorithms of ``--algorithms``, each a known one."""
    names = tuple(x.strip() for x in (text or "").split(",") if x.strip())
    unknown = [x for x in names if x not in ALGORITHM_NAMES]
    if unknown:
        raise UserError(
            f"--algorithms: unknown algorithm {unknown[0]} (known: {', '.join(ALGORITHM_NAMES)})"
        )
    return names


def _worker_counts(text: str | None, max_workers: int, baseline: int) -> list[int]:
    """``--workers 8,16,96``, or the model's default counts from ``baseline`` up to
    ``max_workers``; none below the baseline."""
    if text is None:
        if baseline > max_workers:
            raise UserError(
                f"--baseline-workers {baseline} is more than --max-workers {max_workers}"
            )
        counts = options.default_worker_counts(max_workers)
        return sorted({baseline} | {w for w in counts if w >= baseline})
    counts = predict_bounds.worker_counts(text)
    predict_bounds.check_baseline(baseline, counts)
    return counts


def _write(fits: list[Fit], a: argparse.Namespace, workers: list[int]) -> None:
    """The predictions under ``--out``: a failure to write them is one line."""
    try:
        output.write_fits(fits, a.out, a.batch, workers, a.baseline_workers)
    except OSError as exc:
        raise UserError(f"--out {a.out}: cannot write: {exc.strerror or exc}") from None


def _planned(a: argparse.Namespace, opts: ModelOptions, profile: Profile | None) -> Fit:
    """The workload of ``--workload`` or ``--params`` planned on ``--profile``'s hardware."""
    if profile is None:
        raise UserError(
            "--workload, --params and --tensors plan on a hardware profile: give --profile"
        )
    if a.workload and a.results_dir is None:
        raise UserError(f"--workload {a.workload}: give the RESULTS_DIR whose runs counted it")
    runs = results.load(a.results_dir) if a.workload else None
    params = a.params
    if opts.tensors is not None and a.workload is None:
        params = float(sum(opts.tensors.numels))  # the tensors are the model counted
    planned = plan.resolve_workload(runs, a.workload, params, a.flops_per_sample)
    predict_bounds.check_buckets(planned.params, a.bucket_mb)
    network = measured_links(a.comm_bench, profile)
    profile = network.profile
    lib = options.profile_library(opts, profile.nccl_ll128)
    node = options.node_runs(opts)
    if node is not None:
        opts = options.measured_node(opts, node, a.workload, a.batch)
    planned_fit = plan.plan_fit(
        profile,
        planned,
        samples_per_s=a.samples_per_s,
        precision=a.precision,
        tflops=a.tflops,
        mfu=a.mfu,
        bucket_mb=a.bucket_mb,
        grad_dtype=opts.grad_dtype,
        library=lib,
        overheads=options.overheads(opts, profile.topology.gpus_per_node),
        nccl_channels=options.nccl_channels(opts, profile),
    )
    m, per_size = planned_fit.model, network.bandwidth
    strategy = predict_sync.planned(a, runs, planned.params * m.grad_element_bytes)
    measured = (*m.measured, *network.links, *(["bandwidth per size"] if per_size else []))
    model = replace(m, measured=measured, bandwidth=per_size, strategy=strategy)
    return replace(planned_fit, model=model, caveats=network.caveats)


def _fitted(a: argparse.Namespace, opts: ModelOptions, profile: Profile | None) -> list[Fit]:
    """The model fitted to RESULTS_DIR's runs and comm-bench, one per workload, the options
    applied."""
    runs, bench = results.load(a.results_dir), results.load_comm_bench(a.results_dir)
    keys = predict_sync.keys(a)
    topology = profile.topology if profile else None
    fits, skipped = fit.fit_all(runs, bench, topology, keys, per_size=True)
    if not fits and a.sync is not None:
        raise UserError(
            f"nothing to fit in {a.results_dir} for --sync {a.sync}: need its workers=1 runs "
            f"and comm-bench results of the same machine ({'; '.join(skipped) or 'no such runs'})"
        )
    if not fits:
        raise UserError(
            f"nothing to fit in {a.results_dir}: need workers=1 runs and comm-bench results "
            f"of the same machine ({'; '.join(skipped)})"
        )
    for reason in skipped:
        print(f"dpsuite: warning: skipped {reason}", file=sys.stderr)
    node = options.node_runs(opts)
    applied = []
    for one in fits:  # a node efficiency from --node-efficiency-from: each workload's own
        chosen = opts if node is None else options.measured_node(opts, node, one.workload, a.batch)
        applied.append(options.apply(one, chosen))
    return applied
