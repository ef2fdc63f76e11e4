"""`dpsuite comm-bench`: nccl-tests definitions, the correctness check, results and bad input."""

import json

import pytest
import torch

from suite import results
from suite.errors import UserError
from suite.measure import comm_bench


@pytest.mark.parametrize("n,factor", [(1, 0.0), (2, 1.0), (4, 1.5), (8, 1.75)])
def test_busbw_is_algbw_times_2_n_minus_1_over_n(n, factor):
    # These factors are exact binary fractions, so the identity must hold bit for bit.
    for size, t in [(1024, 3.1e-5), (64 * 2**20, 0.0731), (3 * 2**30, 1.7)]:
        algbw, busbw = comm_bench.bandwidths(size, t, n)
        assert algbw == size / t / 1e9
        assert busbw == algbw * factor
        assert comm_bench.bus_factor(n) == 2 * (n - 1) / n


def reduced_pattern(count: int, world: int, dtype: torch.dtype) -> torch.Tensor:
    """What a correct sum all-reduce of the ranks' patterns returns."""
    total = torch.zeros(count, dtype=torch.float64)
    for r in range(world):
        part = torch.empty(count, dtype=dtype)
        comm_bench.fill_pattern(part, r)
        total += part.to(torch.float64)
    return total.to(dtype)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("world", [1, 2, 3, 8])
def test_correctness_check_catches_a_planted_wrong_value(dtype, world):
    count = comm_bench.CHUNK + 5  # spans two chunks of the check
    result = reduced_pattern(count, world, comm_bench.DTYPES[dtype])
    assert comm_bench.count_wrong(result, world, dtype) == 0
    for pos in (0, 3, comm_bench.CHUNK, count - 1):
        planted = result.clone()
        planted[pos] += 1
        assert comm_bench.count_wrong(planted, world, dtype) == 1
    planted = result.clone()
    planted[7:11] = 0
    assert comm_bench.count_wrong(planted, world, dtype) == 4
    # a rank's contribution missing everywhere is caught too
    if world > 1:
        missing = reduced_pattern(count, world - 1, comm_bench.DTYPES[dtype])
        assert comm_bench.count_wrong(missing, world, dtype) == count


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
    args = ["--sizes", "1K:64K", "--factor", "4", "--warmup", "1", "--iters", "3"]
    assert dpsuite("comm-bench", *args, "--results-dir", str(tmp_path), "--tag", "ci") == 0
    frame = results.load_comm_bench(tmp_path)
    assert list(frame["size_bytes"]) == [1024, 4096, 16384, 65536]
    assert list(frame["count"]) == [256, 1024, 4096, 16384]
    assert (frame["errors"] == 0).all() and (frame["time_us"] > 0).all()
    assert (frame["busbw_GBps"] == frame["algbw_GBps"]).all()  # n = 2: 2(n-1)/n = 1
    assert set(frame["world_size"]) == {2} and set(frame["backend"]) == {"gloo"}
    (meta_file,) = tmp_path.rglob("comm_bench.json")
    meta = json.loads(meta_file.read_text())
    assert meta["bench_id"] == meta_file.parent.name and meta["bench_id"].startswith("ci-gloo-w2")
    assert meta["dtype"] == "fp32" and meta["warmup"] == 1 and meta["iters"] == 3
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
