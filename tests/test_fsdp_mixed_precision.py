"""FSDP's mixed-precision policy (``sync.mixed_precision``): built from the run's precision for
a GPU, refused where it cannot apply; checked without a GPU."""

from __future__ import annotations

import pytest
import torch
from torch.distributed.fsdp import MixedPrecisionPolicy

from dpsuite.sync.config import FSDPConfig
from dpsuite.sync.fsdp import FSDP, mixed_precision_policy


@pytest.mark.parametrize(
    ("precision", "dtype"), [("bf16", torch.bfloat16), ("fp16", torch.float16)]
)
def test_the_policy_gathers_in_the_runs_16_bit_dtype_and_reduces_in_float32(precision, dtype):
    policy = mixed_precision_policy(precision)
    assert isinstance(policy, MixedPrecisionPolicy)
    assert policy.param_dtype == dtype
    assert policy.reduce_dtype == torch.float32


@pytest.mark.parametrize("precision", ["fp32", "fp64"])
def test_a_full_precision_run_has_no_policy_to_build(precision):
    with pytest.raises(ValueError, match="needs precision=bf16 or fp16"):
        mixed_precision_policy(precision)


def test_the_config_accepts_a_gpu_at_16_bits_only():
    config = FSDPConfig(mixed_precision=True)
    config.check_device("cuda", "bf16")
    config.check_device("cuda", "fp16")
    with pytest.raises(ValueError, match="needs device=cuda"):
        config.check_device("cpu", "bf16")
    with pytest.raises(ValueError, match="needs precision=bf16 or fp16"):
        config.check_device("cuda", "fp32")
    FSDPConfig().check_device("cpu", "fp32")  # off: nothing to check
    assert "mixed precision" in config.label and "mixed" not in FSDPConfig().label


def test_the_all_gathers_are_counted_at_the_gathered_dtype():
    strategy = FSDP(FSDPConfig(), torch.device("cpu"), world_size=2)
    strategy.unit_param_bytes = [(100.0, 2), (40.0, 1), (0.0, 1)]  # ZeRO-3 block, root, empty
    # each rank sends (n-1)/n of a unit per all-gather and per reduce-scatter
    assert strategy.fixed_step_traffic(None) == (0.5 * (100 * 3 + 40 * 2), 5)
    strategy.gather_ratio = 0.5  # bf16 gathers of float32 parameters
    assert strategy.fixed_step_traffic(None) == (0.5 * (100 * 2 + 40 * 1.5), 5)
