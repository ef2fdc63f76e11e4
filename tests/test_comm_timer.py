"""The timed all-reduce hook and the no_sync calibration, on 2 real gloo ranks."""

import pytest
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from dpsuite.measure.calibration import time_without_sync
from dpsuite.measure.comm_probe import CommProbe, reducer_timers
from dpsuite.measure.comm_timer import CommTimer, union_length
from dpsuite.measure.step_timer import StepTimer
from dpsuite.optim.precision import Precision
from dpsuite.runtime import distributed
from dpsuite.runtime.ranks import Ranks
from dpsuite.sync.counter import CommCounter


def test_union_length_counts_overlap_once():
    assert union_length([]) == 0
    assert union_length([(0.0, 1.0), (2.0, 3.0)]) == 2.0
    assert union_length([(0.0, 2.0), (1.0, 3.0)]) == 3.0
    assert union_length([(1.0, 3.0), (0.0, 4.0), (5.0, 6.0)]) == 5.0


@pytest.mark.parametrize(("files_steps", "every"), [(False, 10), (False, 1), (True, 10)])
def test_the_comm_probe_is_due_on_sampled_iterations_only_where_nothing_is_filed(
    files_steps, every
):
    cpu = torch.device("cpu")
    probe = CommProbe(nn.Linear(2, 2), CommCounter(files_steps=files_steps), StepTimer(cpu), cpu, 1)
    probe.every = every
    probe.sampling = not files_steps  # as it is on DDP with its built-in all-reduce
    due = [probe.next_due(s) for s in (0, 8, 9, 10, 19)]
    if files_steps or every == 1:
        assert due == [0, 8, 9, 10, 19], "every step"
    else:
        assert due == [9, 9, 9, 19, 19], "each sampled iteration: its start, the last read"


def _rank(local_rank: int, init_method: str) -> None:
    """Assertions run inside each rank; a failure fails the test through the spawner."""
    distributed.init_group("gloo", Ranks(local_rank, 2, local_rank, 2), init_method, 60)
    try:
        _check_hook_and_calibration(local_rank)
    finally:
        distributed.shutdown()


def _check_hook_and_calibration(rank: int) -> None:
    device = torch.device("cpu")
    torch.manual_seed(0)
    # Three large layers and a small bucket cap: several buckets per step.
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.Linear(512, 10))
    net = DDP(model, bucket_cap_mb=0.5)
    comm = CommTimer(device)
    comm.attach(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    amp = Precision.create("fp32", device)
    g = torch.Generator().manual_seed(rank)
    x, y = torch.randn(64, 256, generator=g), torch.randint(0, 10, (64,), generator=g)

    def run_step(idx):
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(net(x[idx]), y[idx])
        loss.backward()
        opt.step()
        return loss

    batches = [(0, torch.arange(i * 8, i * 8 + 8)) for i in range(8)]
    timer = StepTimer(device, warmup=0)
    for i, (_, idx) in enumerate(batches):
        timer.start()
        comm.begin_step()
        run_step(idx)
        step_s = timer.stop(i)
        c = comm.end_step()
        # DDP starts with one bucket and re-buckets by gradient order after its first step.
        assert c.buckets >= (2 if i else 1), c
        assert 0 < c.busy_s <= step_s, (c, step_s)
        assert 0 <= c.tail_s <= c.busy_s, c

    before = [p.detach().clone() for p in model.parameters()]
    momentum = [opt.state[p]["momentum_buffer"].clone() for p in model.parameters()]
    calls = comm.calls
    no_sync = time_without_sync(
        model, net.no_sync(), opt, amp, run_step, iter(batches), 1, 4, device
    )
    assert comm.calls == calls, "no gradient may be all-reduced under no_sync"
    assert len(no_sync) == 4 and all(t > 0 for t in no_sync)
    # the calibration stepped the optimizer, and everything was put back bit for bit
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters(), strict=True))
    after = [opt.state[p]["momentum_buffer"] for p in model.parameters()]
    assert all(torch.equal(a, b) for a, b in zip(momentum, after, strict=True))
    assert all(p.grad is None for p in model.parameters())

    comm.begin_step()
    run_step(batches[0][1])
    assert comm.end_step().buckets >= 2 and comm.calls > calls, "sync is back on afterwards"

    # The comm probe reads DDP's timers without its strings: the same numbers.
    full, timers = net._get_ddp_logging_data(), reducer_timers(net)
    assert "backward_compute_time_start" in timers and "module_name" not in timers
    assert all(full[key] == value for key, value in timers.items())


@pytest.mark.multiproc
def test_hook_times_every_bucket_and_no_sync_disables_it():
    distributed.spawn_local(_rank, (), nprocs=2, threads_per_worker=1)
