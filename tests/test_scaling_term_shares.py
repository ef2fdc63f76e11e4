"""Each term of a predicted step: its share of the step and its source (measured, datasheet
or assumed), the wait for the slowest rank from the recorded per-rank step times."""

from dataclasses import replace

import pytest

from dpsuite.analysis.scaling.compute import ComputeModel
from dpsuite.analysis.scaling.model import Overheads, ScalingModel
from dpsuite.analysis.scaling.term_shares import format_terms, step_terms
from dpsuite.analysis.scaling.topology import Link, Topology

DGX = Topology(Link(3e-6, 150e9), Link(10e-6, 50e9), gpus_per_node=8)
BASE = ScalingModel(DGX, ComputeModel(0.0, 1e-3), grad_bytes=100e6, measured=("compute",))
JITTERY = replace(
    BASE,
    overheads=Overheads(step_samples=(0.8, 0.9, 1.0, 1.1, 1.3)),
    measured=("compute", "links", "network", "straggler jitter"),
)


def _terms(model, n):
    return {t.name: t for t in step_terms(model, n, 32)}


def test_the_wait_for_the_slowest_rank_is_measured_and_grows_with_n():
    shares = [_terms(JITTERY, n)["slowest-of-N wait"].seconds for n in (2, 8, 64, 1024)]
    assert shares == sorted(shares) and shares[0] > 0 and shares[-1] > shares[0]
    wait = _terms(JITTERY, 64)["slowest-of-N wait"]
    assert wait.source == "measured: expected slowest of 64 draws from 5 recorded step times"
    assert wait.seconds == pytest.approx(JITTERY.step(64, 32).wait_s)


def test_with_no_recorded_step_times_the_wait_is_assumed_zero_and_says_so():
    wait = _terms(BASE, 64)["slowest-of-N wait"]
    assert wait.seconds == 0 and wait.source.startswith("assumed 0")


def test_the_links_source_is_comm_bench_or_the_datasheet():
    assert _terms(JITTERY, 64)["exposed all-reduce"].source == "measured: comm-bench"
    assert _terms(BASE, 64)["exposed all-reduce"].source.startswith("datasheet")
    one_node = replace(JITTERY, measured=("compute", "links"))  # comm-bench on one node only
    assert _terms(one_node, 8)["exposed all-reduce"].source == "measured: comm-bench"
    assert _terms(one_node, 64)["exposed all-reduce"].source == (
        "measured: comm-bench on one node (the network: datasheet)"
    )


def test_the_shares_add_up_to_the_step():
    terms = step_terms(JITTERY, 64, 32)
    assert sum(t.seconds for t in terms) == pytest.approx(JITTERY.step_s(64, 32))
    line = format_terms(JITTERY, 64, 32)
    shares = [float(part.split(" %")[0].split()[-1]) for part in line.split(": ", 1)[1].split("; ")]
    assert sum(shares) == pytest.approx(100, abs=0.3)
    assert "slowest-of-N wait" in line and "(measured: comm-bench)" in line
