"""Two test nodes pinned to cores of their own (tests/cluster/pinned_nodes.py, root): each node's
processes run on its core only, under its own hostname, in its own network namespace; comm-bench
across them records that they are one host, and `dpsuite predict` says so; stopping them leaves
nothing behind. `nox -s cluster` runs these."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import pytest

from dpsuite import results
from dpsuite.analysis.scaling.measurement_caveats import bench_caveats
from tests.cluster.pinned_nodes import PinnedNodes

pytestmark = pytest.mark.multinode

PROBE = "import os, socket; print(sorted(os.sched_getaffinity(0)), socket.gethostname())"


@pytest.fixture
def nodes():
    if os.geteuid() != 0 or (os.cpu_count() or 1) < 2:
        pytest.skip("pinned test nodes need root (namespaces, links) and two cores")
    pinned = PinnedNodes()
    pinned.start()
    yield pinned
    pinned.stop()
    assert pinned.leftovers() == []


def test_each_node_runs_on_its_own_core_under_its_own_name(nodes):
    seen = []
    for node in (0, 1):
        proc = nodes.popen(node, [sys.executable, "-c", PROBE], stdout=subprocess.PIPE, text=True)
        seen.append(proc.communicate(timeout=60)[0].strip())
    assert seen == ["[0] pn1", "[1] pn2"]


def test_comm_bench_across_the_pinned_nodes_says_they_are_one_host(nodes, tmp_path):
    argv = [sys.executable, "-m", "dpsuite", "comm-bench", "--sizes", "64K,1M", "-w", "1",
            "-n", "2", "--results-dir", str(tmp_path)]  # fmt: skip
    nodes.run_on_both(argv, timeout=300, log=tmp_path / "logs" / "bench")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bench = results.load_comm_bench(tmp_path)
    assert set(bench["world_size"]) == {2} and set(bench["hardware.workers_per_host"]) == {1}
    assert set(bench["hardware.kernels"]) == {1} and set(bench["hardware.cpus_usable"]) == {1}
    [caveat] = bench_caveats(bench)
    assert "one host (one kernel)" in caveat and "pinned to 1 of the host's" in caveat


def test_stop_ends_what_was_started_and_removes_the_namespaces(nodes):
    sleeper = nodes.popen(1, ["sleep", "600"])
    names = nodes.namespaces
    nodes.stop()
    assert sleeper.poll() is not None  # ended by its pid
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(name in listed for name in names)
