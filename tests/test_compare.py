"""`dpsuite compare`: throughput B / A per configuration of two machines' results, the gate on a
regression (`--fail-below`), what differs between the machines' runs, and no regression called on
repeats too scattered to show one."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from tests import report_trees as trees
from tests.report_pages import assert_valid_images, findings_of, headline_of

QUIET_A = {1: [1000.0, 1040.0, 960.0], 2: [1900.0, 1950.0, 1850.0]}
# B: as fast at 1 worker; at 2 workers its repeats range from 200 to 900 samples/s.
NOISY_B = {1: [1010.0, 990.0, 1030.0], 2: [200.0, 900.0, 250.0]}


def set_run_settings(root: Path, threads: int, env: dict[str, str]) -> None:
    """Record how the runs were made (threads per worker, environment), as a run records them;
    neither is part of the config its run id hashes."""
    for file in root.rglob("run.json"):
        record = json.loads(file.read_text())
        record["threads_per_worker"] = threads
        record["hardware"].update(threads_per_worker=threads, env=env)
        file.write_text(json.dumps(record))


@pytest.fixture(scope="module")
def machines(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("compare")
    trees.write_repeated(root / "a", "setupA", QUIET_A)
    trees.write_repeated(root / "b", "setupB", NOISY_B)
    set_run_settings(root / "a", threads=1, env={"GLOO_SOCKET_IFNAME": "lo"})
    set_run_settings(root / "b", threads=2, env={"GLOO_SOCKET_IFNAME": "lo", "NCCL_ALGO": "Ring"})
    return root / "a", root / "b"


def test_machine_lines_name_every_setting_that_differs(dpsuite, capsys, machines, tmp_path):
    a, b = machines
    out = tmp_path / "cmp"
    assert dpsuite("compare", str(a), str(b), "--out", str(out)) == 0
    md = (out / "index.md").read_text()
    line_a = next(line.strip() for line in md.splitlines() if "Machine `setupA`" in line)
    line_b = next(line.strip() for line in md.splitlines() if "Machine `setupB`" in line)
    assert line_a.endswith("; differs: threads/worker 1, NCCL_ALGO=unset"), line_a
    assert line_b.endswith("; differs: threads/worker 2, NCCL_ALGO=Ring"), line_b
    assert "GLOO_SOCKET_IFNAME" not in md  # the same on both sides


def test_a_wide_interval_is_said_in_the_headline(dpsuite, capsys, machines, tmp_path):
    a, b = machines
    out = tmp_path / "cmp"
    assert dpsuite("compare", str(a), str(b), "--out", str(out)) == 0
    printed = capsys.readouterr().out
    headline = headline_of(out)
    assert headline[1].startswith("Too noisy to call: rerun. 1 of 2 configurations on `setupB`")
    assert "mnist1d_mlp, 2 workers, 32/worker" in headline[1]
    ratios = pd.read_csv(out / "ratios.csv").set_index("workers")
    assert list(ratios["too_noisy"]) == [False, True]
    assert ratios.loc[2, "ratio_spread"] > 2 > ratios.loc[1, "ratio_spread"]
    assert "too noisy" in printed.split("2 workers", 1)[1].splitlines()[0]


def test_the_gate_refuses_to_call_a_regression_on_a_wide_interval(
    dpsuite, capsys, machines, tmp_path
):
    a, b = machines
    gate = ["--fail-below", "0.95"]
    assert dpsuite("compare", str(a), str(b), "--out", str(tmp_path / "c1"), *gate) == 3
    err = capsys.readouterr().err
    assert "dpsuite: regression" not in err
    (line,) = [x for x in err.splitlines() if x.startswith("dpsuite: too noisy to call: ")]
    assert line.startswith("dpsuite: too noisy to call: mnist1d_mlp, 2 workers, 32/worker: ")
    assert line.endswith("apart (limit 2×): rerun, or --allow-noisy to gate on it"), line
    assert "too noisy to call (interval wider than 2×)" in headline_of(tmp_path / "c1")[-1]
    # asked to, it calls the regression (the whole interval is below the gate)
    out = tmp_path / "c2"
    assert dpsuite("compare", str(a), str(b), "--out", str(out), *gate, "--allow-noisy") == 1
    assert "dpsuite: regression: mnist1d_mlp, 2 workers" in capsys.readouterr().err
    # a wider limit, stated, also lets it be called
    out = tmp_path / "c3"
    assert dpsuite("compare", str(a), str(b), "--out", str(out), *gate, "--max-spread", "50") == 1


@pytest.mark.parametrize("value", ["1", "0.5", "nan"])
def test_max_spread_bad_value_is_one_line(dpsuite, capsys, machines, tmp_path, value):
    a, b = machines
    assert (
        dpsuite("compare", str(a), str(b), "--out", str(tmp_path / "c"), "--max-spread", value) == 2
    )
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("dpsuite: error: ") and "max-spread" in err


def test_compare_two_tagged_trees(dpsuite, capsys, tmp_path):
    a, b = tmp_path / "box-a", tmp_path / "box-b"
    trees.write_scaling(a, tag="box-a", host="host-a")
    trees.write_comm_bench(a, tag="box-a", peak=4.0)
    trees.write_scaling(b, tag="box-b", host="host-b", speed=0.5)
    trees.write_comm_bench(b, tag="box-b", peak=1.0)
    out = tmp_path / "cmp"
    assert dpsuite("compare", str(a), str(b), "--out", str(out)) == 0
    printed = capsys.readouterr().out
    assert assert_valid_images(out) == {
        "throughput.png",
        "efficiency.png",
        "allreduce_bandwidth.png",
    }
    assert headline_of(out) == [
        "Over 4 configurations run on both, `box-b` has 0.50× the throughput of `box-a` "
        "(median; from 0.50× to 0.50×)."
    ]
    found = findings_of(out)
    for machine in ("box-a", "box-b"):  # efficiency is the same shape on both
        label = f"{machine} · mnist1d_mlp · 32/worker"
        assert f"{label}: largest worker count with ≥ 80 % scaling efficiency: 4 (85 %)." in found
    ratios = pd.read_csv(out / "ratios.csv")
    assert sorted(ratios["workers"]) == sorted(trees.THROUGHPUT)
    assert ratios["ratio_B_over_A"].round(6).eq(0.5).all()
    assert ratios["ratio_low"].isna().all(), "one run per point: no interval"
    assert set(pd.read_csv(out / "summary.csv")["machine"]) == {"box-a", "box-b"}
    assert set(pd.read_parquet(out / "summary.parquet")["machine"]) == {"box-a", "box-b"}
    # The ratio table comes first, in the terminal and in the report.
    assert printed.startswith("throughput B / A per configuration (A: box-a, B: box-b):")
    assert "mnist1d_mlp, 8 workers, 32/worker" in printed and "0.50×" in printed
    md = (out / "index.md").read_text()
    assert md.index("## Throughput B ÷ A per configuration") < md.index("## Findings")


def test_compare_untagged_groups_by_fingerprint(dpsuite, capsys, tmp_path):
    a, b = tmp_path / "one", tmp_path / "two"
    trees.write_scaling(a, tag=None, host="alpha")
    trees.write_scaling(b, tag=None, host="beta", speed=0.8)
    out = tmp_path / "cmp"
    assert dpsuite("compare", str(a), str(b), "--out", str(out)) == 0
    assert headline_of(out)[0].startswith(
        "Over 4 configurations run on both, `beta (id-beta)` has 0.80× the throughput of "
        "`alpha (id-alpha)`"
    )


def test_nothing_to_compare_is_one_line_and_a_non_zero_exit(
    dpsuite, capsys, scaling_tree, tmp_path
):
    """The same tree twice: one machine, one directory, one set of settings."""
    out = tmp_path / "cmp"
    assert dpsuite("compare", str(scaling_tree), str(scaling_tree), "--out", str(out)) == 2
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [
        "dpsuite: error: nothing to compare: every run is on `box-a` with the same settings; "
        "give another machine's results (hardware.tag=NAME names a machine) or --by a setting "
        "that differs"
    ]
    assert captured.out == "" and not out.exists()


def test_compare_gates_a_regression(dpsuite, capsys, repeated_machines, tmp_path):
    a, b = repeated_machines
    assert dpsuite("compare", str(a), str(b), "--out", str(tmp_path / "ok")) == 0
    capsys.readouterr()
    assert (
        dpsuite("compare", str(a), str(b), "--out", str(tmp_path / "cmp"), "--fail-below", "0.95")
        == 1
    )
    captured = capsys.readouterr()
    regressions = [
        line for line in captured.err.splitlines() if line.startswith("dpsuite: regression: ")
    ]
    assert len(regressions) == 1, captured.err
    assert regressions[0].startswith(
        "dpsuite: regression: mnist1d_mlp, 2 workers, 32/worker: candidate B `box-b` "
        f"({b}) / baseline A `box-a` ({a}) = 0.81× ("
    )
    assert regressions[0].endswith(") < 0.95: FAIL")
    ratios = pd.read_csv(tmp_path / "cmp" / "ratios.csv").set_index("workers")
    assert ratios.loc[2, "ratio_B_over_A"] == pytest.approx(1540.0 / 1900.0)
    assert ratios.loc[2, "ratio_high"] < 0.95  # the whole interval is below the gate
    assert ratios.loc[1, "ratio_low"] < 1.0 < ratios.loc[1, "ratio_high"]
    assert (
        "1 configuration regressed below 0.95× the throughput on `box-a`"
        in (headline_of(tmp_path / "cmp")[1])
    )
    # The same machines the other way round: B is faster everywhere, nothing regressed.
    assert (
        dpsuite("compare", str(b), str(a), "--out", str(tmp_path / "rev"), "--fail-below", "0.95")
        == 0
    )
    assert "dpsuite: regression" not in capsys.readouterr().err
    assert (
        headline_of(tmp_path / "rev")[1]
        == "No configuration is below 0.95× its throughput on `box-b`."
    )


def test_a_ratio_whose_interval_covers_the_gate_is_not_a_regression(
    dpsuite, capsys, repeated_machines, tmp_path
):
    """At 1 worker B ÷ A is 1.01×, below a gate at 1.02, but its interval reaches above it:
    the repeats do not show a regression. At 2 workers (0.81×) they do."""
    a, b = repeated_machines
    out = tmp_path / "cmp"
    assert dpsuite("compare", str(a), str(b), "--out", str(out), "--fail-below", "1.02") == 1
    err = capsys.readouterr().err
    assert "2 workers" in err and "1 worker," not in err
    one = pd.read_csv(out / "ratios.csv").set_index("workers").loc[1]
    assert one["ratio_B_over_A"] < 1.02 < one["ratio_high"]


@pytest.mark.parametrize("value", ["0", "-1", "abc"])
def test_fail_below_bad_value_is_one_line(dpsuite, capsys, repeated_machines, tmp_path, value):
    a, b = repeated_machines
    out = tmp_path / "cmp"
    assert dpsuite("compare", str(a), str(b), "--out", str(out), "--fail-below", value) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("dpsuite: error: ") and "fail-below" in err
    assert not out.exists()


def test_fail_below_with_nothing_to_compare_is_an_error(dpsuite, capsys, scaling_tree, tmp_path):
    out = tmp_path / "cmp"
    assert dpsuite("compare", str(scaling_tree), "--out", str(out), "--fail-below", "0.9") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "dpsuite: error: nothing to compare: every run is on `box-a` with the same settings; "
        "give another machine's results (hardware.tag=NAME names a machine) or --by a setting "
        "that differs"
    ]


def set_hardware(root: Path, **fields) -> None:
    """Change the recorded fingerprint of every run below ``root`` (not part of its run id)."""
    for file in root.rglob("run.json"):
        record = json.loads(file.read_text())
        record["hardware"].update(fields)
        file.write_text(json.dumps(record))


def test_the_gate_line_names_the_baseline_and_the_candidate(
    dpsuite, capsys, repeated_machines, tmp_path
):
    """Given the other way round, the gate judges box-a against box-b, and every line says so."""
    a, b = repeated_machines
    out = tmp_path / "rev"
    assert dpsuite("compare", str(b), str(a), "--out", str(out), "--fail-below", "0.95") == 0
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"dpsuite: gate: candidate B `box-a` ({a}) / baseline A `box-b` ({b}): 0 of 2 "
        "configurations below 0.95: PASS"
    ]
    assert dpsuite("compare", str(a), str(b), "--out", str(out), "--fail-below", "0.95") == 1
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == (
        f"dpsuite: gate: candidate B `box-b` ({b}) / baseline A `box-a` ({a}): 1 of 2 "
        "configurations below 0.95: FAIL"
    )


def test_a_tree_of_several_machines_is_paired_machine_by_machine(dpsuite, capsys, tmp_path):
    """Mine (one CPU machine) against a reference of a CPU twin and a GPU node: only the twin is
    compared, and the pairing is printed; the GPU node is named as not compared."""
    mine, reference = tmp_path / "mine", tmp_path / "reference"
    trees.write_repeated(mine, "mine", trees.REPEATED_B)
    set_hardware(mine, cpu="Xeon", tag=None, machine_id="id-mine")
    trees.write_repeated(reference / "cpu", "xeon-cpu", trees.REPEATED_A)
    set_hardware(reference / "cpu", cpu="Xeon")
    trees.write_repeated(reference / "gpu", "h200", {1: [500.0], 2: [900.0]})
    set_hardware(reference / "gpu", cpu="Xeon", accelerator="NVIDIA H200", accelerator_count=8)
    out = tmp_path / "cmp"
    assert dpsuite("compare", str(reference), str(mine), "--out", str(out)) == 0
    printed = capsys.readouterr().out.splitlines()
    cpu, mine_side = f"xeon-cpu in {reference}", f"mine (id-mine) in {mine}"
    assert f"Compared (candidate B / baseline A): `{mine_side}` / `{cpu}`" in printed
    assert f"Not compared: h200 in {reference}: no counterpart" in printed
    ratios = pd.read_csv(out / "ratios.csv")
    assert set(ratios["A"]) == {cpu} and set(ratios["B"]) == {mine_side}
    assert not any("h200" in line for line in headline_of(out))


def test_compare_by_torch_version_on_one_host(dpsuite, capsys, tmp_path):
    """torch 2.13 and 2.14 on one untagged host, in two directories and in one."""
    old, new = tmp_path / "old", tmp_path / "new"
    trees.write_repeated(old, "box", trees.REPEATED_A)
    trees.write_repeated(new, "box", trees.REPEATED_B)
    set_hardware(new, torch="2.14.0+cpu")
    out = tmp_path / "cmp"
    gate = ["--by", "hardware.torch", "--fail-below", "0.95"]
    assert dpsuite("compare", str(new), str(old), "--out", str(out), *gate) == 0
    captured = capsys.readouterr()
    # the first directory's torch is the baseline
    assert "(A: torch 2.14.0+cpu, B: torch 2.13.0+cpu)" in captured.out.splitlines()[0]
    assert dpsuite("compare", str(old), str(new), "--out", str(out), *gate) == 1
    captured = capsys.readouterr()
    assert captured.err.splitlines()[0].startswith(
        "dpsuite: regression: mnist1d_mlp, 2 workers, 32/worker: candidate B `torch 2.14.0+cpu` ("
    )
    ratios = pd.read_csv(out / "ratios.csv").set_index("workers")
    assert ratios.loc[2, "ratio_B_over_A"] == pytest.approx(1540.0 / 1900.0)
    # In one directory, without --by: torch is the one setting that differs, so it is used.
    both = tmp_path / "both"
    shutil.copytree(old, both)
    for workers, measured in trees.REPEATED_B.items():
        for repeat, tput in enumerate(measured, start=len(measured)):  # run ids of their own
            run = trees.write_run(
                both, workers=workers, samples_per_s=tput, tag="box", host="box", repeat=repeat
            )
            set_hardware(run, torch="2.14.0+cpu")
    assert dpsuite("compare", str(both), "--out", str(tmp_path / "one")) == 0
    printed = capsys.readouterr().out
    assert "Grouped by torch (--by hardware.torch): every run is on one machine" in printed
    assert "Compared (candidate B / baseline A): `torch 2.14.0+cpu` / `torch 2.13.0+cpu`" in (
        printed
    )


def test_by_a_setting_that_no_run_records_is_one_line(dpsuite, capsys, repeated_machines):
    a, b = repeated_machines
    assert dpsuite("compare", str(a), str(b), "--by", "config.nonsense") == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("dpsuite: error: nothing to compare: no run records `config.nonsense`")


def test_a_run_read_through_overlapping_trees_is_counted_once(dpsuite, capsys, tmp_path):
    """`compare TREE TREE/boxb`: boxb's runs are read twice, counted once (the first tree's),
    with one warning line; the comparison is then boxa against boxb."""
    trees.write_repeated(tmp_path / "tree" / "boxa", "boxa", trees.REPEATED_A)
    trees.write_repeated(tmp_path / "tree" / "boxb", "boxb", trees.REPEATED_B)
    out = tmp_path / "cmp"
    tree = tmp_path / "tree"
    assert dpsuite("compare", str(tree), str(tree / "boxb"), "--out", str(out)) == 0
    captured = capsys.readouterr()
    summary = pd.read_csv(out / "summary.csv")
    assert len(summary) == len(set(summary["run_dir"])) == 12
    assert "Compared (candidate B / baseline A): `boxb` / `boxa`" in captured.out
    again = [line for line in captured.err.splitlines() if "counted once" in line]
    assert again == [
        f"dpsuite: warning: {tree / 'boxb'}: 6 runs already read from an earlier "
        "directory, counted once"
    ]
