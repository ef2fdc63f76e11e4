"""The `sync` config group: run ids, run.json keys, and the `sync` sweep preset."""

from __future__ import annotations

import itertools

import pytest
from hydra import compose, initialize_config_module

from dpsuite import sync
from dpsuite.conf import run_spec
from dpsuite.conf.compose import compose_config
from dpsuite.results import run_identity


def resolved(*overrides: str) -> run_spec.RunSpec:
    return run_spec.resolve(compose_config(list(overrides)))


def test_run_id_follows_the_sync_config(tmp_path):
    out = f"results_dir={tmp_path}"
    ids = {
        resolved(out, "workers=2", *o).run_id
        for o in [
            [],
            ["sync=param_server"],
            ["sync=local_sgd"],
            ["sync=local_sgd", "sync.period=8"],
            ["sync=fp16"],
            ["sync=powersgd"],
            ["sync=powersgd", "sync.rank=4"],
        ]
    }
    assert len(ids) == 7
    assert "-local_sgd-" in resolved(out, "workers=2", "sync=local_sgd").run_id
    assert "allreduce" not in resolved(out, "workers=2").run_id


def test_the_default_strategy_stays_out_of_the_run_identity(tmp_path):
    """All-reduce runs hash as they did before strategies could be chosen."""
    plain = resolved(f"results_dir={tmp_path}", "workers=2")
    local = resolved(f"results_dir={tmp_path}", "workers=2", "sync=local_sgd")
    assert "sync" not in run_identity(plain.config, 2, 64)
    assert run_identity(local.config, 2, 64)["sync"]["name"] == "local_sgd"


def test_run_json_names_the_strategy_at_top_level(tmp_path):
    spec = resolved(f"results_dir={tmp_path}", "workers=2", "sync=local_sgd", "sync.period=8")
    summary = spec.summary()
    assert summary["sync"] == "local_sgd"
    assert summary["sync_label"] == "local_sgd (period 8)"
    assert spec.config["sync"] == {"name": "local_sgd", "period": 8, "warmup_steps": 0}


def test_sync_sweep_preset_is_a_valid_grid(tmp_path):
    """`dpsuite run -m +sweep=sync`: every point of the preset's grid resolves, ids distinct."""
    with initialize_config_module(config_module="dpsuite.conf", version_base=None):
        cfg = compose("config", overrides=["+sweep=sync"], return_hydra_config=True)
    params = cfg.hydra.sweeper.params
    axes = {key: str(value).split(",") for key, value in params.items()}
    assert set(axes["sync"]) == {
        "allreduce",
        "param_server",
        "local_sgd",
        "fp16",
        "powersgd",
        "zero1",
        "fsdp",
    }
    assert axes["workers"] == ["1", "2", "4"]
    assert len(axes["workload"]) == 1
    ids = set()
    for point in itertools.product(*([f"{k}={v}" for v in vs] for k, vs in axes.items())):
        spec = resolved("+sweep=sync", *point, f"results_dir={tmp_path}")
        assert spec.cfg.mode == "ddp"
        ids.add(spec.run_id)
    assert len(ids) == 21


@pytest.mark.parametrize("name", list(sync.CONFIGS))
def test_every_config_names_its_strategy_class(name):
    """The one list: each strategy's config names (`class_path`) a SyncStrategy whose `Config`
    is that config, under the config's name."""
    config = sync.CONFIGS[name]
    cls = sync.strategy(name)
    assert issubclass(cls, sync.SyncStrategy) and cls is not sync.SyncStrategy
    assert cls.Config is config and cls.name == config.name == name
    assert list(sync.STRATEGIES) == list(sync.CONFIGS)
    assert sync.traits(name) == {"sync_order": list(sync.CONFIGS).index(name)}
