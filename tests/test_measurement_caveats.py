"""The caveats `dpsuite predict` prints of what its measurements share or lack: nodes that are
one host (cores shared or pinned apart), and a host loaded by others' work."""

from __future__ import annotations

import pandas as pd

from dpsuite.analysis.scaling.measurement_caveats import (
    bench_caveats,
    caveats,
    load_caveats,
    run_caveats,
)


def bench(kernels, usable: int = 1, per_host: int = 1, load: float = 0.1) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "world_size": [2, 2],
            "hardware.workers_per_host": [per_host] * 2,
            "hardware.kernels": [kernels] * 2,
            "hardware.cpus_usable": [usable] * 2,
            "hardware.cpu_count": [2, 2],
            "hardware.load_average": [load] * 2,
        }
    )


def test_nodes_on_one_kernel_are_one_host_pinned_or_not():
    [pinned] = bench_caveats(bench(1, usable=1))
    assert "one host (one kernel)" in pinned and "pinned to 1 of the host's 2 cores" in pinned
    [shared] = bench_caveats(bench(1, usable=2))
    assert "each node may use all 2 cores, so their ranks time-share them" in shared


def test_nodes_on_kernels_of_their_own_or_one_node_have_no_such_caveat():
    assert bench_caveats(bench(2)) == []
    assert bench_caveats(bench(1, per_host=2)) == []  # one node: nothing crossed between nodes
    assert bench_caveats(bench(None)) == []  # recorded before kernels were: not known
    assert bench_caveats(pd.DataFrame()) == []


def test_a_run_whose_nodes_share_a_kernel():
    nodes = [
        {"hostname": "pn1", "kernel_boot_id": "k", "cpus_usable": 1, "cpu_count": 2},
        {"hostname": "pn2", "kernel_boot_id": "k", "cpus_usable": 1, "cpu_count": 2},
    ]
    [caveat] = run_caveats(pd.DataFrame({"hardware.nodes": [nodes]}))
    assert "the nodes of the runs are one host" in caveat and "pinned to 1" in caveat
    apart = [{**nodes[0]}, {**nodes[1], "kernel_boot_id": "other"}]
    assert run_caveats(pd.DataFrame({"hardware.nodes": [apart]})) == []


def test_a_loaded_host_is_said_with_its_load_average():
    runs = pd.DataFrame({"hardware.load_average": [3.0, 5.0], "hardware.cpu_count": [2, 2]})
    [caveat] = load_caveats(runs, bench(2, load=0.2))
    assert "load average 4.00 on 2 cores while the runs measured" in caveat
    assert "comm-bench" not in caveat  # 0.2 on 2 cores: not loaded
    assert load_caveats(runs.assign(**{"hardware.load_average": 0.5}), pd.DataFrame()) == []
    assert len(caveats(runs, bench(1, load=9.0))) == 2


def test_predict_prints_the_caveats_of_what_it_was_fed(dpsuite, tmp_path, capsys):
    from dpsuite import results
    from tests.test_predict import write_bench, write_runs

    write_runs(tmp_path)
    write_bench(tmp_path, world=2)
    write_bench(tmp_path, world=4, per_host=2)  # across two nodes ...
    meta_file = tmp_path / "comm_bench" / "bench-w4" / "comm_bench.json"
    meta = results.read_json(meta_file)
    meta["hardware"].update(kernels=1, cpus_usable=2, cpu_count=2)  # ... on one kernel
    results.write_json_atomic(meta_file, meta)
    assert dpsuite("predict", str(tmp_path), "--workers", "1,2,4") == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("   caveat: ")]
    assert len(lines) == 1 and "comm-bench ran across are one host" in lines[0], lines
