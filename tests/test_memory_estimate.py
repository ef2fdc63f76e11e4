"""A run's memory is estimated from its model before any rank starts, and a run that cannot fit
in the host's available memory is refused with the estimate (nothing is allocated here)."""

from __future__ import annotations

import pytest
import torch

from dpsuite.conf import memory_check
from dpsuite.conf.compose import compose_config
from dpsuite.conf.run_spec import resolve
from dpsuite.errors import UserError
from dpsuite.measure import memory_estimate
from dpsuite.workloads import lookup
from dpsuite.workloads.configs.gpt2 import GPT2Config
from dpsuite.workloads.configs.tiny_gpt import TinyGPTConfig

GIB = 2**30
GPT2_XL = ["workload=gpt2", "workload.size=1.5B", "workers=2", "device=cpu"]


@pytest.fixture
def host_of_23_gib(monkeypatch):
    monkeypatch.setattr(memory_check, "mem_available", lambda: 23 * GIB)


def _meta_count(config) -> int:
    with torch.device("meta"):  # counted without allocating a parameter
        model = lookup(config.name)(config).build_model()
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize(
    "config",
    [GPT2Config(size="1.5B"), GPT2Config(layers=3, width=48, heads=4, context=20), TinyGPTConfig()],
    ids=["gpt2-1.5B", "gpt2-3x48", "tiny_gpt"],
)
def test_a_transformer_config_counts_its_parameters_as_its_model_has_them(config):
    assert config.dims().parameters == _meta_count(config)


def test_gpt2_xl_on_two_workers_is_refused_on_a_23_gib_host_with_the_estimate(
    tmp_path, host_of_23_gib
):
    with pytest.raises(UserError) as err:
        resolve(compose_config([*GPT2_XL, f"results_dir={tmp_path}"]))
    line = str(err.value)
    assert "\n" not in line
    assert "23.0 GiB this host has available" in line
    assert "1,557,686,400 parameters" in line
    assert "checks.memory=false" in line
    assert not any(tmp_path.iterdir())  # refused before anything was written


def test_the_estimate_of_gpt2_xl_counts_weights_gradients_momentum_and_buckets(tmp_path):
    spec = resolve(compose_config([*GPT2_XL, "checks.memory=false", f"results_dir={tmp_path}"]))
    workload = spec.build_workload()
    est = memory_check.run_estimate(spec.cfg, workload, spec.per_worker_batch, 64, 2)
    weights = 1_557_686_400 * 4
    for part in ("parameters", "gradients", "optimizer", "ddp_buckets"):
        assert est.parts[part] == weights
    assert est.activation_rule == "transformer"
    assert est.total == 2 * est.per_rank > 23 * GIB
    # what run.json records: the same, but for the import footprint, which is this process's
    # resident set at the time (other tests in the process move it)
    assert abs(spec.memory_estimate - est.per_rank) < GIB


def _gpt2_xl_estimate(tmp_path, *sync: str):
    spec = resolve(
        compose_config([*GPT2_XL, *sync, "checks.memory=false", f"results_dir={tmp_path}"])
    )
    return memory_check.run_estimate(spec.cfg, spec.build_workload(), spec.per_worker_batch, 64, 2)


@pytest.mark.parametrize(
    ("sync", "divided", "buckets"),
    [
        ("sync=allreduce", (), True),
        ("sync=zero1", ("optimizer",), True),
        ("sync=fsdp", ("parameters", "gradients", "optimizer"), False),
    ],
)
def test_a_sharding_strategy_divides_what_it_shards_by_the_workers(
    tmp_path, sync, divided, buckets
):
    est = _gpt2_xl_estimate(tmp_path, sync)
    weights = 1_557_686_400 * 4
    for part in ("parameters", "gradients", "optimizer"):
        assert est.parts[part] == (weights // 2 if part in divided else weights), part
    assert est.parts["ddp_buckets"] == (weights if buckets else 0)
    # sharded parameters are gathered whole for evaluation (a plain copy on every rank)
    assert est.parts.get("gathered", 0) == (weights if "parameters" in divided else 0)


@pytest.mark.parametrize("reshard", ["true", "false"])
def test_fsdp_counts_one_whole_copy_of_the_parameters_beside_its_shards(tmp_path, reshard):
    est = _gpt2_xl_estimate(tmp_path, "sync=fsdp", f"sync.reshard_after_forward={reshard}")
    weights = 1_557_686_400 * 4
    state = est.parts["parameters"] + est.parts["gradients"] + est.parts["optimizer"]
    assert state == 3 * weights // 2
    assert est.parts["gathered"] == weights
    assert "gathered 5.8 GiB" in memory_check.describe(est)


def test_a_model_ddp_cannot_fit_is_refused_for_ddp_and_accepted_for_fsdp(tmp_path, monkeypatch):
    ddp = _gpt2_xl_estimate(tmp_path / "ddp", "sync=allreduce").total
    fsdp = _gpt2_xl_estimate(tmp_path / "fsdp", "sync=fsdp").total
    assert fsdp < ddp
    monkeypatch.setattr(memory_check, "mem_available", lambda: (ddp + fsdp) // 2)
    with pytest.raises(UserError, match="this run needs about"):
        resolve(compose_config([*GPT2_XL, "sync=allreduce", f"results_dir={tmp_path / 'a'}"]))
    spec = resolve(compose_config([*GPT2_XL, "sync=fsdp", f"results_dir={tmp_path / 'b'}"]))
    assert spec.memory_estimate * 2 <= (ddp + fsdp) // 2


def test_checks_memory_false_starts_a_run_that_does_not_fit(tmp_path, host_of_23_gib):
    spec = resolve(compose_config([*GPT2_XL, "checks.memory=false", f"results_dir={tmp_path}"]))
    assert spec.workers == 2


def test_a_small_run_fits_and_its_estimate_is_recorded(tmp_path, host_of_23_gib):
    spec = resolve(
        compose_config(
            ["workload=mnist1d_mlp", "workers=2", "device=cpu", f"results_dir={tmp_path}"]
        )
    )
    assert spec.memory_estimate is not None and 0 < spec.memory_estimate < GIB


def test_a_small_host_refuses_even_a_small_run(tmp_path, monkeypatch):
    monkeypatch.setattr(memory_check, "mem_available", lambda: 1024)
    with pytest.raises(UserError, match="more than the 1.0 KiB"):
        resolve(compose_config(["workload=mnist1d_mlp", "device=cpu", f"results_dir={tmp_path}"]))


@pytest.mark.parametrize(
    ("overrides", "buffers"),
    [([], 1), (["optimizer.momentum=0"], 0), (["lr_rule=lars", "optimizer.momentum=0"], 1)],
)
def test_the_optimizer_state_follows_the_runs_optimizer(tmp_path, overrides, buffers):
    spec = resolve(compose_config([*overrides, f"results_dir={tmp_path}"]))
    assert memory_check.momentum_buffers(spec.cfg) == buffers


def test_a_cnn_is_measured_on_the_meta_device_and_its_activations_grow_with_the_batch():
    workload = lookup("cifar_resnet")(lookup("cifar_resnet").Config())
    small = memory_estimate.measured_activation_bytes(workload, 8)
    large = memory_estimate.measured_activation_bytes(workload, 32)
    assert small is not None and large == pytest.approx(4 * small, rel=0.01)


def test_activation_checkpointing_lowers_the_transformer_estimate():
    plain = GPT2Config(size="124M").dims()
    checkpointed = GPT2Config(size="124M", activation_checkpointing=True).dims()
    assert memory_estimate.transformer_activation_elements(
        checkpointed, 8
    ) < memory_estimate.transformer_activation_elements(plain, 8)


def test_a_workload_without_a_sample_shape_says_its_activations_are_not_estimated():
    workload = lookup("cifar_resnet")(lookup("cifar_resnet").Config())
    workload.sample_shape = lambda: None  # as a plugin that does not say
    est = memory_estimate.estimate(workload, 8, "fp32", 1, 1, False, 0)
    assert est.activation_rule == "none" and est.parts["activations"] == 0
    assert "activations not estimated" in memory_check.describe(est)


def test_points_of_a_sweep_measure_one_model_config_on_the_meta_device_once(monkeypatch):
    cls = lookup("mnist1d_mlp")
    builds = []
    build = cls.build_model
    monkeypatch.setattr(cls, "build_model", lambda self: builds.append(1) or build(self))
    first = [memory_estimate.measured_activation_bytes(cls(cls.Config()), b) for b in (8, 8, 16)]
    again = memory_estimate.measured_activation_bytes(cls(cls.Config(num_samples=2000)), 8)
    assert first[0] == first[1] == again and first[2] > first[0]
    assert len(builds) == 3  # batch 8 once, batch 16, and the config that differs
