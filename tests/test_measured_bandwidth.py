"""The network as comm-bench measured it, per message size: read off a small hand-made
comm_bench.csv, interpolated in log-size, extrapolated (and said so) beyond it, on one node and
across nodes, and what `dpsuite predict` prints of it."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from dpsuite import results
from dpsuite.analysis.scaling.fit import usable_rows
from dpsuite.analysis.scaling.measured_bandwidth import from_bench
from tests import report_trees as trees

MIB = 2**20
# (size, bus bandwidth GB/s) of a hand-made all-reduce benchmark: faster with the size.
ONE_NODE = {1 * MIB: 1.0, 4 * MIB: 3.0, 16 * MIB: 4.0}
ACROSS = {1 * MIB: 0.05, 16 * MIB: 0.1}


def write_bench(
    root, name: str, busbw: dict, world: int = 2, per_host: int = 2, **hardware
) -> None:
    """A comm_bench.csv (and its json) whose rows are ``busbw`` at ``world`` ranks."""
    rows = []
    for size, gbps in busbw.items():
        algbw = gbps / (2 * (world - 1) / world)
        rows.append(
            {
                "size_bytes": size,
                "count": size // 4,
                "dtype": "fp32",
                "time_us": size / (algbw * 1e9) * 1e6,
                "algbw_GBps": algbw,
                "busbw_GBps": gbps,
                "errors": 0,
            }
        )
    meta = {
        "bench_id": name,
        "world_size": world,
        "backend": "gloo",
        "hardware": {
            **trees.hardware("box-a", "box-a"),
            "workers_per_host": per_host,
            **hardware,
        },
    }
    results.write_comm_bench(root / "comm_bench" / name, meta, rows)


def measured(root):
    return from_bench(usable_rows(results.load_comm_bench(root)))


def test_between_measured_sizes_the_bandwidth_is_interpolated_in_log_size(tmp_path):
    write_bench(tmp_path, "w2", ONE_NODE)
    curve = measured(tmp_path).curve(1, 2)
    assert curve.at(4 * MIB).busbw_Bps == pytest.approx(3e9)
    assert curve.at(4 * MIB).source == "measured"
    two = curve.at(2 * MIB)  # half-way between 1 and 4 MiB in log-size
    assert two.busbw_Bps == pytest.approx(2e9) and two.source == "measured, interpolated"
    assert curve.at(8 * MIB).busbw_Bps == pytest.approx(3.5e9)
    assert not two.extrapolated


def test_beyond_the_measured_sizes_it_is_extrapolated_and_says_so(tmp_path):
    write_bench(tmp_path, "w2", ONE_NODE)
    curve = measured(tmp_path).curve(1, 2)
    above = curve.at(64 * MIB)
    assert above.busbw_Bps == pytest.approx(4e9)  # the largest size's bandwidth held
    assert above.extrapolated and above.source == "extrapolated above 16 MiB: its rate held"
    below = curve.at(MIB / 4)
    assert below.busbw_Bps == pytest.approx(0.25e9)  # the smallest size's time held
    assert below.source == "extrapolated below 1 MiB: its time held"


def test_one_node_and_across_nodes_are_read_apart(tmp_path):
    write_bench(tmp_path, "w2-one-node", ONE_NODE)
    write_bench(tmp_path, "w2-two-nodes", ACROSS, per_host=1)
    bandwidth = measured(tmp_path)
    assert bandwidth.scopes() == ["one node", "across nodes"]
    assert bandwidth.curve(1, 2).at(MIB).busbw_Bps == pytest.approx(1e9)
    assert bandwidth.curve(2, 2).at(MIB).busbw_Bps == pytest.approx(0.05e9)
    assert bandwidth.curve(2, 2).nodes == 2


def test_the_curve_of_the_most_ranks_measured_up_to_n_is_used(tmp_path):
    write_bench(tmp_path, "w2", ONE_NODE, world=2, per_host=4)
    write_bench(tmp_path, "w4", {size: b / 2 for size, b in ONE_NODE.items()}, 4, 4)
    bandwidth = measured(tmp_path)
    assert bandwidth.curve(1, 2).world_size == 2 and bandwidth.curve(1, 3).world_size == 2
    assert bandwidth.curve(1, 4).world_size == 4 and bandwidth.curve(1, 64).world_size == 4


PLAN = ["--profile", "dgx-a100", "--params", "1e6", "--samples-per-s", "900"]


def test_predict_reads_each_bucket_off_the_measured_bandwidth(tmp_path, dpsuite, capsys):
    """One bucket of 4e6 bytes on 2 ranks of one node: its all-reduce takes what comm-bench's
    bus bandwidth at that size (interpolated between 1 and 4 MiB) says, and the printout's
    bandwidth table and term shares say where each number comes from."""
    write_bench(tmp_path / "bench", "w2", ONE_NODE)
    out = tmp_path / "pred"
    args = ["predict", *PLAN, "--workers", "1,2,16", "--out", str(out)]
    assert dpsuite(*args, "--comm-bench", str(tmp_path / "bench")) == 0
    text = capsys.readouterr().out
    busbw = 1e9 + 2e9 * math.log(4e6 / MIB) / math.log(4)
    comm = pd.read_csv(out / "predictions.csv").set_index("workers")["comm_s"]
    assert comm[2] == pytest.approx(2 * (2 - 1) / 2 * 4e6 / busbw, rel=1e-6)
    assert "bus bandwidth per message size (GB/s), on one node (8 ranks); across nodes (16" in text
    [row] = [line for line in text.splitlines() if "3.81 MiB    x1" in line]
    assert "(measured, interpolated)" in row and "(datasheet)" in row  # the network: datasheet
    # its share at 16 workers: two nodes, whose network comm-bench did not measure
    assert "measured: comm-bench on one node (the network: datasheet)" in text
    assert "bandwidth per size" in text  # among the measured terms


def test_without_comm_bench_the_table_says_datasheet(dpsuite, capsys):
    assert dpsuite("predict", *PLAN, "--workers", "1,16") == 0
    text = capsys.readouterr().out
    [row] = [line for line in text.splitlines() if "3.81 MiB    x1" in line]
    assert row.count("(datasheet)") == 2 and "measured" not in row


def test_an_extrapolated_bucket_is_counted_in_its_terms_source(tmp_path, dpsuite, capsys):
    write_bench(tmp_path / "bench", "w2", {16 * MIB: 4.0, 64 * MIB: 5.0})
    args = ["predict", *PLAN, "--workers", "1,2", "--comm-bench", str(tmp_path / "bench")]
    assert dpsuite(*args) == 0
    text = capsys.readouterr().out
    assert "extrapolated below 16 MiB: its time held" in text
    assert "bus bandwidth per message size, 1 of 1 buckets extrapolated" in text


def test_an_unusable_comm_bench_file_is_one_error_line(tmp_path, dpsuite, capfd):
    write_bench(tmp_path / "bench", "w2", ONE_NODE)
    (tmp_path / "bench" / "comm_bench" / "w2" / "comm_bench.csv").write_text("size_bytes\nlots\n")
    args = ["predict", *PLAN, "--comm-bench", str(tmp_path / "bench")]
    assert dpsuite(*args) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("dpsuite: error: --comm-bench ")
    assert "skipping unreadable comm-bench result" in err[0] and "w2" in err[0]


def test_planning_on_benches_across_nodes_of_one_host_says_so(tmp_path, dpsuite, capsys):
    write_bench(tmp_path / "bench", "w2", ACROSS, per_host=1, kernels=1, cpus_usable=1)
    args = ["predict", *PLAN, "--workers", "1,16", "--comm-bench", str(tmp_path / "bench")]
    assert dpsuite(*args) == 0
    text = capsys.readouterr().out
    [caveat] = [line for line in text.splitlines() if line.startswith("   caveat: ")]
    assert "one host (one kernel)" in caveat and "pinned to 1 of the host's 8 cores" in caveat
    [row] = [line for line in text.splitlines() if "3.81 MiB    x1" in line]
    # one rank a node, as benched; across nodes 4e6 bytes between 1 and 16 MiB, in log-size
    across = 0.05 + 0.05 * math.log(4e6 / MIB) / math.log(16)
    assert row.endswith(f"{across:.3g} (measured, interpolated)")
