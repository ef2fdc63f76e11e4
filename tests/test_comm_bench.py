"""`dpsuite comm-bench`: nccl-tests definitions, the correctness check, results and bad input."""

import json

import pytest
import torch

from dpsuite import results
from dpsuite.errors import UserError
from dpsuite.measure import collectives, comm_bench
from dpsuite.measure.collectives import COLLECTIVES


@pytest.mark.parametrize("n,factor", [(1, 0.0), (2, 1.0), (4, 1.5), (8, 1.75)])
def test_busbw_is_algbw_times_2_n_minus_1_over_n(n, factor):
    # These factors are exact binary fractions, so the identity must hold bit for bit.
    for size, t in [(1024, 3.1e-5), (64 * 2**20, 0.0731), (3 * 2**30, 1.7)]:
        algbw, busbw = comm_bench.bandwidths(size, t, n)
        assert algbw == size / t / 1e9
        assert busbw == algbw * factor
        assert comm_bench.bus_factor(n) == 2 * (n - 1) / n


@pytest.mark.parametrize(
    "collective,factors",  # nccl-tests doc/PERFORMANCE.md, "Summary", at n = 1, 2, 4, 8
    [
        ("all_reduce", (0.0, 1.0, 1.5, 1.75)),
        ("all_gather", (0.0, 0.5, 0.75, 0.875)),
        ("reduce_scatter", (0.0, 0.5, 0.75, 0.875)),
        ("broadcast", (1.0, 1.0, 1.0, 1.0)),
        ("all_to_all", (0.0, 0.5, 0.75, 0.875)),
    ],
)
def test_bus_factor_per_collective(collective, factors):
    for n, factor in zip((1, 2, 4, 8), factors, strict=True):
        assert comm_bench.bus_factor(n, collective) == factor
        algbw, busbw = comm_bench.bandwidths(2**20, 1e-3, n, collective)
        assert algbw == 2**20 / 1e-3 / 1e9 and busbw == algbw * factor


def test_sizes_are_nccl_tests_totals():
    """S is the whole gathered/scattered/sent buffer, rounded down to whole pieces per rank."""
    for name in ("all_gather", "reduce_scatter", "all_to_all"):
        assert COLLECTIVES[name].count(1024, 4, 3) == 255  # 85 elements per rank
        assert COLLECTIVES[name].count(1024, 4, 2) == 256
    for name in ("all_reduce", "broadcast"):
        assert COLLECTIVES[name].count(1024, 4, 3) == 256
    assert COLLECTIVES["all_gather"].buffer_bytes(2**20, 4) == 2**20 * 1.25
    assert COLLECTIVES["all_to_all"].buffer_bytes(2**20, 4) == 2**21
    assert COLLECTIVES["all_reduce"].buffer_bytes(2**20, 4) == 2**20


def reference_outputs(name: str, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """What each rank must hold after the collective, computed from the ranks' inputs by plain
    tensor operations (independent of the check's own formulas)."""
    world = len(inputs)
    if name == "all_reduce":
        return [torch.stack(inputs).double().sum(0)] * world
    if name == "broadcast":
        return [inputs[0].double()] * world
    if name == "all_gather":
        return [torch.cat(inputs).double()] * world
    if name == "reduce_scatter":
        return list(torch.stack(inputs).double().sum(0).chunk(world))
    # all_to_all: rank k receives piece k of every rank's input, in rank order
    pieces = [x.double().chunk(world) for x in inputs]
    return [torch.cat([pieces[s][k] for s in range(world)]) for k in range(world)]


@pytest.mark.parametrize("name", list(COLLECTIVES))
@pytest.mark.parametrize("world", [1, 2, 3, 8])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_correctness_check_per_collective(name, world, dtype, monkeypatch):
    monkeypatch.setattr(collectives, "CHUNK", 1000)  # small chunks: the same code, less data
    collective, torch_dtype = COLLECTIVES[name], comm_bench.DTYPES[dtype]
    count = collective.count(2 * 1000 + 600, 1, world)  # spans three chunks
    piece, rtol = count // world, comm_bench.TOLERANCE[dtype]
    # the root's buffer is the broadcast's input; the others' start zeroed
    inputs = [
        collective.buffers(count, world, r, torch_dtype, torch.device("cpu"))[0]
        for r in range(world)
    ]
    if name == "broadcast":
        assert all((x == 0).all() for x in inputs[1:])
        inputs = [inputs[0]] * world
    for rank, want in enumerate(reference_outputs(name, inputs)):
        out = want.to(torch_dtype)
        assert collectives.count_wrong(collective, out, rank, world, piece, rtol) == 0
        for pos in (0, 3, min(collectives.CHUNK, out.numel() - 1), out.numel() - 1):
            planted = out.clone()
            planted[pos] += 1
            assert collectives.count_wrong(collective, planted, rank, world, piece, rtol) == 1
        planted = out.clone()
        planted[7:11] = 0
        assert collectives.count_wrong(collective, planted, rank, world, piece, rtol) == 4
    if world > 1:
        # rank 0's data in place of every rank's (for broadcast: a rank that never received)
        if name == "broadcast":
            stale = torch.zeros(count)
        else:
            stale = reference_outputs(name, [inputs[0]] * world)[-1]
        wrong = collectives.count_wrong(
            collective, stale.to(torch_dtype), world - 1, world, piece, rtol
        )
        assert wrong >= stale.numel() // 2


def test_sizes():
    assert comm_bench.parse_size("4096") == 4096
    assert comm_bench.parse_size("1k") == 1024 and comm_bench.parse_size("64MiB") == 64 * 2**20
    assert comm_bench.parse_sizes("1K:16K", 2) == (1024, 2048, 4096, 8192, 16384)
    assert comm_bench.parse_sizes("1K:256M", 4)[-1] == 256 * 2**20
    assert comm_bench.parse_sizes("1M,4K", 2) == (2**20, 4096)
    with pytest.raises(UserError, match="cannot read size"):
        comm_bench.parse_sizes("1K:lots", 2)


@pytest.mark.multiproc
def test_two_rank_bench_writes_table_csv_json_with_fingerprint(dpsuite, tmp_path, capfd):
    # nccl-tests' spellings: -b/-e/-f for the range, -w warm-up and -n timed iterations
    args = ["-b", "1K", "-e", "64K", "-f", "4", "-w", "1", "-n", "3", "--collective", "all"]
    assert dpsuite("comm-bench", *args, "--results-dir", str(tmp_path), "--tag", "ci") == 0
    frame = results.load_comm_bench(tmp_path)
    assert list(frame["collective"].unique()) == list(COLLECTIVES)
    for _, rows in frame.groupby("collective"):
        assert list(rows["size_bytes"]) == [1024, 4096, 16384, 65536]
        assert list(rows["count"]) == [256, 1024, 4096, 16384]
    assert (frame["errors"] == 0).all() and (frame["time_us"] > 0).all()
    factor = frame["collective"].map({"all_reduce": 1.0, "broadcast": 1.0}).fillna(0.5)
    assert (frame["busbw_GBps"] == frame["algbw_GBps"] * factor).all()  # n = 2
    assert set(frame["world_size"]) == {2} and set(frame["backend"]) == {"gloo"}
    (meta_file,) = tmp_path.rglob("comm_bench.json")
    meta = json.loads(meta_file.read_text())
    # the schema is the contract: every column of it, every key one of its
    header = (meta_file.parent / "comm_bench.csv").read_text().splitlines()[0]
    assert header.split(",") == results.schema.names(results.schema.COMM_BENCH_ROWS)
    assert set(meta) <= set(results.schema.names(results.schema.COMM_BENCH_META))
    assert meta["bench_id"] == meta_file.parent.name and meta["bench_id"].startswith("ci-gloo-w2")
    assert meta["dtype"] == "fp32" and meta["warmup"] == 1 and meta["iters"] == 3
    assert meta["collectives"] == list(COLLECTIVES)
    hw = meta["hardware"]
    for key in (
        "cpu",
        "cpu_count",
        "accelerator",
        "accelerator_count",
        "accelerator_memory_gib",
        "backend",
        "torch",
        "cuda",
        "nccl",
        "hostname",
        "threads_per_worker",
        "oversubscribed",
        "tag",
    ):
        assert key in hw, key
    assert hw["tag"] == "ci" and hw["threads_per_worker"] >= 1
    out = capfd.readouterr().out  # printed by rank 0, a child process
    assert "busbw(GB/s)" in out and "65536" in out
    for name in COLLECTIVES:
        assert f"# {name} (" in out


@pytest.mark.parametrize(
    "args,message",
    [
        (["--workers", "0"], "--workers must be an integer >= 1"),
        (["--sizes", "lots"], "cannot read size 'lots'"),
        (["--sizes", "1001"], "not a positive multiple of 4"),
        (["--dtype", "fp8"], "--dtype must be one of"),
        (["--iters", "0"], "--iters must be an integer >= 1"),
        (["--workers", "two"], "invalid int value"),
        (["--backend", "nccl"], "backend=nccl needs device=cuda"),
        (["--collective", "allreduce"], "--collective: unknown 'allreduce'"),
        (["--collective", "all_reduce,gather"], "--collective: unknown 'gather'"),
        (["--sizes", "1K:4K", "-e", "8K"], "give --sizes or -b/-e"),
        (["-b", "4", "--collective", "all_gather"], "too small for all_gather on 2 ranks"),
        (["-e", "4096G"], "do not fit in memory"),
    ],
)
def test_bad_input_one_line(dpsuite, tmp_path, capsys, args, message):
    out = tmp_path / "res"
    assert dpsuite("comm-bench", *args, "--results-dir", str(out)) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("dpsuite: error: ") and message in err
    assert not (out / "comm_bench").exists()


def test_unwritable_results_dir(dpsuite, tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert dpsuite("comm-bench", "--results-dir", str(blocker / "sub")) == 2
    assert "is not writable" in capsys.readouterr().err


def test_memory_check_counts_each_collectives_buffers_and_the_hosts_ranks(tmp_path, monkeypatch):
    from dpsuite.runtime import host_memory

    # Room for 2 ranks of 256 MiB + 40 MiB each, and each rank's process as measured here.
    process = host_memory.rank_footprint()
    available_kib = (2 * (296 * 2**20 + process) + 2**20) // 1024
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(f"MemTotal:  {4 * available_kib} kB\nMemAvailable:  {available_kib} kB\n")
    monkeypatch.setattr(comm_bench, "MEMINFO", meminfo)

    def bench(collective: str, sizes: str, workers: int = 2):
        return comm_bench.resolve(
            workers, sizes, 2, "fp32", 0, 1, "gloo", str(tmp_path), None, collectives=collective
        )

    assert bench("all_reduce", "256M").sizes == (2**28,)  # 2 x (256 + 40 MiB + process) fit
    with pytest.raises(UserError, match=r"all_to_all needs 552\.0 MiB per rank \+ .* MiB for its"):
        bench("all_reduce,all_to_all", "1K:256M")  # 2 x 256 MiB buffers on each rank
    with pytest.raises(UserError, match="x 4 ranks on this host"):
        bench("all_reduce", "256M", workers=4)


def test_results_without_a_collective_read_as_all_reduce(tmp_path):
    bench = tmp_path / "comm_bench" / "old"
    bench.mkdir(parents=True)
    (bench / "comm_bench.json").write_text(json.dumps({"bench_id": "old", "world_size": 2}))
    (bench / "comm_bench.csv").write_text(
        "size_bytes,count,dtype,time_us,algbw_GBps,busbw_GBps,errors\n1024,256,fp32,10,0.1,0.1,0\n"
    )
    frame = results.load_comm_bench(tmp_path)
    assert list(frame["collective"]) == ["all_reduce"] and frame["busbw_GBps"].iloc[0] == 0.1
