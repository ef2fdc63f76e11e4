"""Which GPU a rank binds to, from what it can see: one GPU per task (--gpus-per-task=1,
--gpu-bind, a CUDA_VISIBLE_DEVICES per task) is device 0; a node's GPUs shared by its ranks give
each rank its local rank's; fewer GPUs than ranks is one clear error. No GPU needed: the device
count is faked."""

from __future__ import annotations

import pytest
import torch

from dpsuite.errors import UserError
from dpsuite.runtime import distributed


@pytest.fixture
def visible(monkeypatch):
    """Fake the GPUs this process sees; record the device it binds to."""
    bound: list[int] = []

    def see(count: int) -> list[int]:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
        monkeypatch.setattr(torch.cuda, "set_device", bound.append)
        return bound

    return see


@pytest.mark.parametrize("local_rank", [0, 1, 3])
def test_one_gpu_per_task_is_device_0_whatever_the_local_rank(visible, monkeypatch, local_rank):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", str(local_rank))  # as srun --gpu-bind sets it
    bound = visible(1)
    assert distributed.device_for("cuda", local_rank, 4) == torch.device("cuda", 0)
    assert bound == [0]


@pytest.mark.parametrize("gpus", [4, 8])
def test_ranks_sharing_a_nodes_gpus_take_their_local_rank(visible, gpus):
    bound = visible(gpus)
    assert distributed.device_for("cuda", 3, 4) == torch.device("cuda", 3)
    assert bound == [3]


@pytest.mark.parametrize("gpus", [0, 2])
def test_fewer_gpus_than_ranks_is_one_line_naming_the_variables(visible, monkeypatch, gpus):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1"[: 2 * gpus - 1] if gpus else "")
    monkeypatch.delenv("SLURM_GPUS_PER_TASK", raising=False)
    bound = visible(gpus)
    with pytest.raises(UserError) as err:
        distributed.device_for("cuda", 3, 4)
    message = str(err.value)
    assert "\n" not in message
    assert f"local rank 3 of 4 sees {gpus} GPUs" in message
    assert "CUDA_VISIBLE_DEVICES=" in message and "SLURM_GPUS_PER_TASK=<unset>" in message
    assert bound == []


def test_cpu_runs_never_touch_cuda(visible):
    bound = visible(0)
    assert distributed.device_for("cpu", 5, 8) == torch.device("cpu")
    assert bound == []
