"""What `dpsuite predict` prints and writes: fitted parameters, validation, predictions."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from dpsuite.analysis.scaling import bandwidth_table, leave_last_out, skill, term_shares
from dpsuite.analysis.scaling.allreduce_cost import NCCL_MODEL_VERSION
from dpsuite.analysis.scaling.fit import Fit
from dpsuite.analysis.scaling.model import ScalingModel
from dpsuite.analysis.scaling.published import PUBLISHED
from dpsuite.analysis.scaling.topology import Link


def _link(link: Link) -> str:
    bandwidth = "unbounded" if math.isinf(link.bandwidth_Bps) else f"{link.bandwidth_Bps / 1e9:.3g}"
    text = f"alpha {link.latency_s * 1e6:.1f} us, {bandwidth} GB/s"
    if link.framing is None:
        return text
    return f"{text} of payload ({link.line_Bps / 1e9:.3g} GB/s line; {link.framing.describe()})"


def describe_model(fit: Fit) -> list[str]:
    m, top = fit.model, fit.model.topology
    if top.inter is None or top.gpus_per_node is None:
        network = "between nodes not known: all ranks taken to share one node's link"
    else:
        network = f"{top.gpus_per_node} per node; between nodes {_link(top.inter)} per node"
    buckets = m.buckets()
    packing = (
        f"{len(m.tensor_bytes)} tensors in DDP's {len(buckets)} bucket(s)"
        if m.tensor_bytes
        else f"{len(buckets)} equal bucket(s)"
    )
    lines = [
        f"   links: inside a node {_link(top.intra)} per rank; {network}",
        f"   all-reduce: {m.library.describe()}, algorithms {', '.join(m.library.algorithms())}"
        + (f" (NCCL's tuning model of {NCCL_MODEL_VERSION})" if m.library.backend == "nccl" else "")
        + (
            f"; it holds {100 * m.comm_sm_share:.1f} % of the GPU's SMs while it runs"
            if m.comm_sm_share
            else ""
        ),
        f"   compute {m.compute.fixed_s * 1e3:.3f} ms + {m.compute.per_sample_s * 1e6:.2f} "
        f"us/sample ({100 * m.compute.backward_fraction:.0f} % of it backward); gradients "
        + _gradients(m, packing),
        *_strategy(m),
        *_shape(m.grad_accum, m.overlap),
        *_input(m.input_samples_per_s),
        f"   an efficiency {_kind(m.kind(), m.input_samples_per_s)}; measured terms: {m.terms()}",
    ]
    return lines


def _gradients(m: ScalingModel, packing: str) -> str:
    if m.strategy.name == "fsdp":
        return f"{m.grad_bytes / 2**20:.1f} MiB in {len(m.strategy.units)} FSDP unit(s)"
    largest = max((b for b, _ in m.buckets()), default=0)
    return (
        f"{m.grad_bytes / 2**20:.1f} MiB as {packing}, cap {m.bucket_bytes / 2**20:g} MiB, "
        f"largest {largest / 2**20:.2f} MiB"
    )


def _strategy(m: ScalingModel) -> list[str]:
    """The collectives beyond DDP's all-reduce, where the strategy issues any."""
    s = m.strategy
    if s.name == "zero1":
        tensors = len(m.tensor_bytes) or 1
        return [
            f"   sync zero1: DDP's all-reduce, then {tensors} parameter broadcast(s) after the "
            "optimizer step, waited for (none overlapped)"
        ]
    if s.name != "fsdp":
        return []
    gathers = sum(g for _, g in s.units)
    where = (
        "each waited for where it is issued (gloo: FSDP's collectives block on CPU)"
        if m.library.backend == "gloo" or not m.overlap
        else "prefetched all-gathers and reduce-scatters overlapped with compute"
    )
    return [
        f"   sync {s.label()}: {gathers} all-gather(s) and {len(s.units)} reduce-scatter(s) a "
        f"step, {where}"
    ]


def _shape(grad_accum: int, overlap: bool) -> list[str]:
    """What the step runs, where it is not one micro-batch with the all-reduce overlapped."""
    parts = [f"{grad_accum} micro-batches a step, gradients all-reduced once"] * (grad_accum > 1)
    parts += ["no overlap: the all-reduces start when the backward pass has ended"] * (not overlap)
    return [f"   step: {'; '.join(parts)}"] if parts else []


def _input(rate: float | None) -> list[str]:
    if rate is None:
        return []
    return [
        f"   input: at most {rate:,.0f} samples/s per node (a measured input rate, given); "
        "lines marked input-bound wait for it"
    ]


def _kind(kind: str, input_rate: float | None = None) -> str:
    if kind == "bound" and input_rate is not None:
        return "bound (at most: loading taken to overlap compute; stragglers not measured)"
    if kind == "bound":
        return "bound (at most: nothing measured of what else slows a step)"
    return "estimate"


def format_validation(validation: pd.DataFrame) -> list[str]:
    if validation.empty:
        return []
    lines = ["   validation (measured vs predicted step time):"]
    for r in validation.itertuples():
        lines.append(
            f"     workers {r.workers:>4}  batch {r.per_worker_batch:>4}"
            f"  measured {r.measured_step_s * 1e3:9.3f} ms"
            f"  predicted {r.predicted_step_s * 1e3:9.3f} ms  error {r.error_pct:+6.1f} %"
            + ("  (oversubscribed)" if r.oversubscribed else "")
        )
    return lines


def format_fit(fit: Fit, batch: int, workers: list[int], baseline: int = 1) -> str:
    lines = [f"== {fit.label}", *describe_model(fit)]
    lines += bandwidth_table.format_bandwidth_table(fit.model, max(workers, default=2))
    lines += [f"   caveat: {text}" for text in fit.caveats]
    lines += format_validation(fit.validation)
    lines += skill.format_validation_skill(fit.validation)
    reach = (
        f"validated up to {fit.model.validated_max} workers"
        if not fit.validation.empty
        else "nothing measured to validate it"
    )
    against = f", efficiency against {baseline} workers" if baseline > 1 else ""
    lines.append(f"   prediction at per-worker batch {batch} ({reach}; * = extrapolated{against}):")
    for r in fit.model.predict(workers, batch, baseline).itertuples():
        mark = "*" if r.extrapolated else " "
        algorithm = r.algorithm if r.workers > 1 else "-"
        wait = r.straggler_wait_s + r.overhead_s
        lines.append(
            f"    {mark}workers {r.workers:>4}  nodes {r.nodes:>3}  {algorithm:<16}"
            f"step {r.step_time_s * 1e3:9.3f} ms  exposed comm {r.exposed_comm_s * 1e3:8.3f} ms"
            + (f"  wait+overhead {wait * 1e3:7.3f} ms" if wait > 0 else "")
            + (f"  NCCL's SMs {r.comm_sm_slowdown_s * 1e3:7.3f} ms" if r.comm_sm_slowdown_s else "")
            + f"  {r.samples_per_s:11,.0f} samples/s  efficiency {100 * r.efficiency:5.1f} %"
            + ("  input-bound" if r.input_bound else "")
        )
    if workers:
        lines.append(term_shares.format_terms(fit.model, max(workers), batch))
    return "\n".join(lines)


PUBLISHED_COLUMNS = {
    "result": lambda r: r.label,
    "hardware": lambda r: f"`{r.profile}`",
    "GPUs": lambda r: (
        f"{r.baseline_workers} → {r.workers}" if r.baseline_workers > 1 else f"{r.workers}"
    ),
    "data": lambda r: r.data,
    "published": lambda r: f"{100 * r.published_efficiency:.1f} %",
    "bound": lambda r: f"{100 * r.bound:.1f} %",
    "without NCCL's SMs": lambda r: f"{100 * r.without_sm_share:.1f} %",
    "estimate or bound": lambda r: (
        f"{'≤ ' if r.kind == 'bound' else ''}{100 * r.predicted_efficiency:.1f} %"
    ),
    "points": lambda r: f"{r.difference_points:+.1f}",
    "terms": lambda r: r.terms,
}


def format_published(table: pd.DataFrame) -> str:
    """The published-vs-predicted table as Markdown (docs/scaling-model.md carries the same)."""
    lines = [f"| {' | '.join(PUBLISHED_COLUMNS)} |", "|" + "---|" * len(PUBLISHED_COLUMNS)]
    for r in table.itertuples():
        lines.append(f"| {' | '.join(cell(r) for cell in PUBLISHED_COLUMNS.values())} |")
    return "\n".join(lines)


BOUND_LEGEND = (
    "≤ x %: a bound: a bound is at most this efficiency (nothing measured beyond compute), "
    "not a prediction; its distance from the published value says how loose it is"
)


def format_published_skill(table: pd.DataFrame, path: Path = PUBLISHED) -> str:
    """The published check scored against the two trivial forecasts, then leave-last-out on
    the tables of ``path`` with two or more smaller counts."""
    scored = skill.skill_by_family(skill.published_skill_rows(table))
    held_out_rows = leave_last_out.leave_last_out_table(path)
    if held_out_rows.empty:
        held_out_text = "(no table gives two or more smaller counts)"
    else:
        held_out_text = "\n".join(
            [
                leave_last_out.format_leave_last_out(skill.skill_by_family(held_out_rows)),
                "",
                "each held-out row (efficiency in %, errors in points; the fitted term and each",
                "term's share of the predicted step):",
                leave_last_out.format_leave_last_out_rows(held_out_rows),
            ]
        )
    return "\n".join(
        [
            BOUND_LEGEND,
            "",
            "skill: mean |error| in efficiency points of the model (its estimate, or its bound),",
            "a constant (the mean efficiency of the counts the row was given, baseline 1.0",
            "included) and efficiency that stays what it was at the largest of those counts:",
            skill.format_skill(scored),
            "",
            "leave-last-out: each table with two or more smaller counts, the model's",
            "synchronisation term fitted to their efficiencies, its largest count predicted:",
            held_out_text,
        ]
    )


def format_published_summary(table: pd.DataFrame, tolerance: float) -> str:
    """One line per family of published results (README's table): its hardware, rows, how many
    are within ``tolerance`` points, the range of the differences and the model's terms."""
    lines = [
        f"| published | hardware | rows | within {tolerance:g} points | predicted − published "
        "| terms |",
        "|---|---|---|---|---|---|",
    ]
    for family, rows in table.groupby("family", sort=False):
        within = int((rows["difference_points"].abs() <= tolerance).sum())
        hardware = ", ".join(f"`{p}`" for p in dict.fromkeys(rows["profile"]))
        low, high = rows["difference_points"].min(), rows["difference_points"].max()
        lines.append(
            f"| {family} | {hardware} | {len(rows)} | {within} | {low:+.1f} to {high:+.1f} "
            f"| {_family_terms(rows)} |"
        )
    return "\n".join(lines)


def _family_terms(rows: pd.DataFrame) -> str:
    """The rows' terms merged part by part: library, algorithms, packing, the rest, kinds."""

    def each(column: str) -> list[str]:
        return list(dict.fromkeys(rows[column]))

    extras = dict.fromkeys(x for terms in rows["extra_terms"] for x in terms)
    line = f"{', '.join(each('library'))}: {', '.join(each('algorithm'))}"
    return "; ".join([line, ", ".join(each("packing")), *extras, " or ".join(each("kind"))])


def write_fits(
    fits: list[Fit], out_dir: str | Path, batch: int, workers: list[int], baseline: int = 1
) -> None:
    """predictions.csv, validation.csv and models.csv under ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    preds, vals, models = [], [], []
    for f in fits:
        key = {"hardware": f.hardware, "workload": f.workload, "strategy": f.model.strategy.label()}
        preds.append(f.model.predict(workers, batch, baseline).assign(**key))
        vals.append(f.validation.assign(**key))
        models.append({**key, **f.model.describe()})
    pd.concat(preds).to_csv(out / "predictions.csv", index=False)
    pd.concat(vals).to_csv(out / "validation.csv", index=False)
    pd.DataFrame(models).to_csv(out / "models.csv", index=False)
