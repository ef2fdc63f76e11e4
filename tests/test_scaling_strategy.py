"""The scaling model's sharded strategies: their collectives' costs and bytes, FSDP's schedule,
and `dpsuite predict --sync`."""

from __future__ import annotations

import pandas as pd
import pytest
from torch import nn

from dpsuite import results
from dpsuite.analysis.scaling import allreduce_cost, fsdp_schedule, sharded_cost
from dpsuite.analysis.scaling.compute import ComputeModel
from dpsuite.analysis.scaling.model import ScalingModel
from dpsuite.analysis.scaling.strategy import Strategy, wire_bytes_per_step
from dpsuite.analysis.scaling.topology import Link, Topology
from dpsuite.sync.fsdp import unit_gathers, wrap_units
from tests import report_trees as trees
from tests.test_predict import write_bench, write_runs

LINK = Link(100e-6, 1e9)  # 100 us per hop, 1 GB/s
GLOO = allreduce_cost.Library(backend="gloo")
TOP = Topology(LINK)


def test_all_gather_and_reduce_scatter_are_each_half_a_ring_all_reduce():
    size = 8e6
    for n in (2, 4, 8):
        gather = sharded_cost.all_gather_s(TOP, size, n, GLOO)
        assert gather == pytest.approx((n - 1) * 100e-6 + (n - 1) / n * size / 1e9)
        assert 2 * gather == pytest.approx(allreduce_cost.ring_s(TOP, size, n))
        # ProcessGroupGloo reduce-scatters by all-reducing the whole buffer.
        ring = allreduce_cost.ring_s(TOP, size, n)
        assert sharded_cost.reduce_scatter_s(TOP, size, n, GLOO) == pytest.approx(ring)
        nccl = allreduce_cost.Library(backend="nccl")
        half = sharded_cost.all_gather_s(TOP, size, n, nccl)
        assert sharded_cost.reduce_scatter_s(TOP, size, n, nccl) == pytest.approx(half)
        assert half == pytest.approx(allreduce_cost.nccl_s(TOP, size, n, "ring", False) / 2)
    # A broadcast pipelined along the ring: N-1 hops, the whole buffer once.
    assert sharded_cost.broadcast_s(TOP, size, 4, GLOO) == pytest.approx(3e-4 + size / 1e9)
    assert sharded_cost.all_gather_s(TOP, size, 1, GLOO) == 0.0


def small_model() -> nn.Module:
    """Two Linear blocks: 4x3 + 3 = 15 and 3x2 + 2 = 8 parameters, 60 and 32 bytes."""
    return nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2))


@pytest.mark.parametrize(
    ("name", "reshard", "expected"),
    [
        ("ddp", True, 92.0),  # all-reduce: 2(n-1)/n of 92 bytes
        ("zero1", True, 92.0 + 46.0),  # and each rank's half of the parameters broadcast
        ("fsdp", True, (60 + 32) / 2 * 3),  # per unit two all-gathers and a reduce-scatter
        ("fsdp", False, (60 + 32) / 2 * 2),  # one all-gather
    ],
)
def test_wire_bytes_per_step_by_hand(name, reshard, expected):
    model = small_model()
    units = unit_gathers(model, wrap_units(model, "blocks"), reshard)
    assert units == [(60, 1 + reshard), (32, 1 + reshard), (0, 1)]  # the root holds nothing
    strategy = Strategy(name, reshard, tuple(u for u in units if u[0] > 0))
    assert wire_bytes_per_step(strategy, 92.0, (48.0, 12.0, 24.0, 8.0), 2) == expected


UNITS = ((4e6, 2), (4e6, 2), (1e6, 1))  # two blocks resharded, the root last


def gather(size: float) -> float:
    return sharded_cost.all_gather_s(TOP, size, 2, GLOO)


def gloo_reduce_scatter(size: float) -> float:
    return allreduce_cost.ring_s(TOP, size, 2)  # ProcessGroupGloo all-reduces the buffer


def test_fsdp_without_compute_to_hide_behind_exposes_every_collective():
    serial = fsdp_schedule.serial(UNITS, gather, gather)
    # 8 collectives; each block's three move 4 MB, the root's two 1 MB, half of it per rank
    expected = 8 * 100e-6 + (3 * 8e6 + 2 * 1e6) / 2 / 1e9
    assert serial.exposed_s == serial.comm_s == pytest.approx(expected)
    overlapped = fsdp_schedule.overlapped(UNITS, gather, gather, 0.0, 0.0)
    assert overlapped.comm_s == pytest.approx(serial.comm_s)
    assert overlapped.exposed_s == pytest.approx(serial.comm_s)


def test_fsdp_prefetch_hides_all_but_the_first_gather_and_the_last_reduce_scatter():
    """With passes far longer than the collectives the step waits only for what nothing runs
    before: the root's all-gather before the forward pass, the first backward unit's all-gather
    (no unit before it prefetches it) and the root's reduce-scatter after the backward pass."""
    slow = 10.0
    done = fsdp_schedule.overlapped(UNITS, gather, gather, slow, slow)
    root = gather(1e6)
    first_backward = gather(4e6)
    assert done.exposed_s == pytest.approx(root + first_backward + root)


def model_with(strategy: Strategy) -> ScalingModel:
    return ScalingModel(
        TOP,
        ComputeModel(0.01, 0.0),
        grad_bytes=9e6,
        library=GLOO,
        tensor_bytes=(4e6, 4e6, 1e6),
        strategy=strategy,
    )


def test_each_strategy_adds_its_collectives_to_the_step():
    ddp = model_with(Strategy()).step(2, 32)
    zero1 = model_with(Strategy("zero1")).step(2, 32)
    broadcasts = sum(sharded_cost.broadcast_s(TOP, b, 2, GLOO) for b in (4e6, 4e6, 1e6))
    assert zero1.exposed_s == pytest.approx(ddp.exposed_s + broadcasts)
    fsdp = model_with(Strategy("fsdp", True, UNITS)).step(2, 32)
    serial = fsdp_schedule.serial(UNITS, gather, gloo_reduce_scatter)
    assert fsdp.exposed_s == pytest.approx(serial.comm_s)
    assert model_with(Strategy("fsdp", True, UNITS)).step(1, 32).exposed_s == 0.0


def fsdp_tree(root, reshard: bool = True) -> None:
    """A results tree of ddp runs and fsdp runs of the same workload at 1 and 2 workers."""
    write_runs(root)
    write_bench(root)
    for workers in (1, 2):
        run = trees.write_run(
            root,
            workers=workers,
            samples_per_s=1000.0 * workers,
            sync="fsdp",
            sync_config={"name": "fsdp", "reshard_after_forward": reshard, "wrap": "root"},
        )
        rec = results.read_json(run / "run.json")
        rec.update(num_params=1000)
        results.write_json_atomic(run / "run.json", rec)


def test_predict_results_models_each_strategy_its_runs_recorded(dpsuite, tmp_path, capsys):
    root = tmp_path / "res"
    fsdp_tree(root, reshard=False)
    assert dpsuite("predict", str(root), "--workers", "1,2") == 0
    out = capsys.readouterr().out
    assert out.count("\n== ") + out.startswith("== ") == 2
    assert "/ fsdp (reshard off, wrap root)" in out and "1 all-gather(s) and" in out
    # The fitted synchronisation term makes the 2-worker validation exact: the model's own
    # prediction of it is printed beside it.
    assert out.count("before that fit, its own terms: workers 2 batch 32 predicted") == 2
    assert dpsuite("predict", str(root), "--workers", "1,2", "--sync", "ddp") == 0
    assert "fsdp" not in capsys.readouterr().out
    assert dpsuite("predict", str(root), "--sync", "fsdp", "--out", str(tmp_path / "p")) == 0
    models = pd.read_csv(tmp_path / "p" / "models.csv")
    assert list(models["strategy"]) == ["fsdp (reshard off, wrap root)"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--sync", "zero3"), "invalid choice: 'zero3'"),
        (("--reshard-after-forward", "true"), "--reshard-after-forward goes with --sync fsdp"),
        (("--sync", "zero1", "--reshard-after-forward", "off"), "goes with --sync fsdp"),
        (("--sync", "fsdp", "--reshard-after-forward", "maybe"), "invalid choice: 'maybe'"),
        (("--sync", "fsdp", "--library", "horovod"), "does not run on --library horovod"),
        (("--sync", "fsdp", "--grad-dtype", "bf16"), "--grad-dtype is a DDP compression"),
        (("--sync", "fsdp", "--grad-accum", "2"), "--grad-accum goes with --sync ddp or zero1"),
        (("--sync", "fsdp", "--reshard-after-forward", "true"), "nothing to fit in"),
    ],
)
def test_bad_sync_values_and_combinations_are_one_line(dpsuite, tmp_path, capsys, args, message):
    root = tmp_path / "res"
    fsdp_tree(root, reshard=False)  # no fsdp runs with reshard on
    assert dpsuite("predict", str(root), *args) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert out == "" and len(lines) == 1 and lines[0].startswith("dpsuite: error: "), err
    assert message in lines[0]


def test_published_takes_no_sync(dpsuite, capsys):
    assert dpsuite("predict", "--published", "--sync", "fsdp") == 2
    assert "drop --sync" in capsys.readouterr().err


@pytest.mark.multiproc
def test_model_wire_bytes_equal_what_the_counter_records_in_real_runs(tmp_path):
    """Two real workers per strategy: the model's bytes per step are the traffic counter's."""
    from dpsuite.analysis.scaling.strategy_runs import strategy_keys, strategy_of
    from dpsuite.analysis.scaling.tensors import tensor_numels
    from dpsuite.cli.main import main
    from tests.conftest import SMALL

    out = tmp_path / "res"
    common = ["run", "-m", *SMALL, "workers=2", "train.max_steps=3", f"results_dir={out}"]
    assert main([*common, "sync=allreduce,zero1"]) == 0
    assert main([*common, "sync=fsdp", "sync.reshard_after_forward=true,false"]) == 0
    runs = results.load(out)
    keys = strategy_keys(runs)
    assert sorted(keys) == ["ddp", "fsdp", "fsdp-no-reshard", "zero1"]
    for i in range(len(runs)):
        one = runs.iloc[[i]]
        params = 4.0 * float(one["num_params"].iloc[0])  # fp32
        tensors = tuple(4.0 * n for n in tensor_numels(one))
        strategy = strategy_of(keys.iloc[i], one, params)
        modelled = wire_bytes_per_step(strategy, params, tensors, 2)
        assert modelled == pytest.approx(float(one["wire_bytes_per_step"].iloc[0]), rel=1e-9)
