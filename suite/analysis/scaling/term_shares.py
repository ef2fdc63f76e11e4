"""Each term of one predicted step, its share of the step and where it comes from: measured
(the user's runs or comm-bench), datasheet (a hardware profile) or assumed."""

from __future__ import annotations

from dataclasses import dataclass

from dpsuite.analysis.scaling.model import ScalingModel


@dataclass(frozen=True)
class Term:
    name: str
    seconds: float
    source: str


def step_terms(model: ScalingModel, n: int, batch: int) -> list[Term]:
    """The step's terms at ``n`` workers, each with its source; the ones that are zero left
    out except compute and the wait for the slowest rank (whose absence is itself a caveat)."""
    step, measured = model.step(n, batch), set(model.measured)
    samples = len(model.overheads.step_samples)
    wait_source = (
        f"measured: expected slowest of {n} draws from {samples} recorded step times"
        if samples >= 2
        else "assumed 0: no per-rank step times recorded"
    )
    terms = [
        Term("compute", step.compute_s, _source("compute" in measured, "assumed (MFU of peak)")),
        Term("slowest-of-N wait", step.wait_s, wait_source),
        Term(_comm_name(model), step.exposed_s, _links(model, n)),
        Term("NCCL's SMs", step.slowed_s, "datasheet: NCCL's channels / the GPU's SMs"),
        Term("carried overhead", step.overhead_s, "measured: node efficiency"),
        Term("synchronisation per collective", step.sync_s, _sync(model)),
        Term("input wait", step.input_wait_s, "measured: input rate, given"),
    ]
    return [t for t in terms if t.seconds > 0 or t.name in ("compute", "slowest-of-N wait")]


def _comm_name(model: ScalingModel) -> str:
    """What the exposed communication is made of under the model's strategy."""
    return {
        "zero1": "exposed all-reduce and parameter broadcasts",
        "fsdp": "exposed all-gathers and reduce-scatters",
    }.get(model.strategy.name, "exposed all-reduce")


def _collectives(model: ScalingModel) -> int:
    """The collectives of one step the synchronisation term counts."""
    s = model.strategy
    if s.name == "fsdp":
        return sum(gathers + 1 for _, gathers in s.units)
    broadcasts = len(model.tensor_bytes or (0.0,)) if s.name == "zero1" else 0
    return len(model.buckets()) + broadcasts


def _sync(model: ScalingModel) -> str:
    sync = model.overheads.sync
    counts = ", ".join(str(n) for n in sync.fitted_on)
    return (
        f"measured: fitted at {counts} workers, {sync.fixed_s * 1e3:.3g} ms + "
        f"{sync.scale:.3g} x NCCL's latency of {_collectives(model)} collectives"
    )


def _source(measured: bool, otherwise: str) -> str:
    return "measured" if measured else otherwise


def _links(model: ScalingModel, n: int) -> str:
    """Where the all-reduces' time at ``n`` ranks comes from: comm-bench's bus bandwidth per
    message size (and how many buckets lie beyond the sizes measured), its links fitted, or a
    profile's datasheet."""
    readings = [model.reading(size, n) for size, _ in model.buckets()]
    if readings and all(r is not None for r in readings):
        outside = sum(r.extrapolated for r in readings)
        beyond = f", {outside} of {len(readings)} buckets extrapolated" if outside else ""
        return f"measured: comm-bench bus bandwidth per message size{beyond}"
    measured, nodes = set(model.measured), model.topology.nodes(n)
    if "links" not in measured:
        return "datasheet: the profile's links"
    if nodes > 1 and "network" not in measured:
        return "measured: comm-bench on one node (the network: datasheet)"
    return "measured: comm-bench"


def format_terms(model: ScalingModel, n: int, batch: int) -> str:
    """One line: each term's share of the step at ``n`` workers and its source."""
    terms = step_terms(model, n, batch)
    total = sum(t.seconds for t in terms) or 1.0
    parts = [f"{t.name} {100 * t.seconds / total:.1f} % ({t.source})" for t in terms]
    return f"   terms at {n} workers, share of the step: " + "; ".join(parts)
