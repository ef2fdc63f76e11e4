"""dpsuite.conf: the schema, the composed config's checks, and the run spec it resolves to."""

from __future__ import annotations

from dataclasses import fields, is_dataclass

import pytest

from dpsuite import sync
from dpsuite.conf import schema
from dpsuite.conf.checks import field_docs
from dpsuite.conf.compose import compose_config
from dpsuite.conf.run_spec import resolve
from dpsuite.errors import UserError
from dpsuite.optim import lr_rules
from dpsuite.results import run_identity
from dpsuite.workloads import REGISTRY


def config_classes() -> list[type]:
    """Every dataclass a config is made of: the schema's sections and each group's options."""
    found, todo = [], [schema.RunConfig]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo += [f.type for f in fields(cls) if isinstance(f.type, type) and is_dataclass(f.type)]
    sections = {getattr(schema, name) for name in dir(schema) if name.endswith("Config")} - {
        schema.RunConfig
    }
    return [
        *found,
        *sorted(sections, key=lambda c: c.__name__),  # one order in every process (pytest-xdist)
        *(w.Config for w in REGISTRY.values()),
        *(type(r.config) for r in lr_rules.RULES.values()),
        *(s.Config for s in sync.STRATEGIES.values()),
    ]


@pytest.mark.parametrize("cls", config_classes(), ids=lambda c: c.__name__)
def test_every_config_key_says_what_it_means(cls):
    docs = field_docs(cls)
    names = [f.name for f in fields(cls) if f.name not in ("train", "optimizer", "schedule")]
    sections = {"ddp", "timing", "noise_scale", "hardware"}
    undocumented = [n for n in names if n not in docs and n not in sections]
    assert not undocumented, f"{cls.__name__}: {undocumented} have no line below them"


def test_defaults_live_in_one_place(tmp_path):
    """train.epochs and optimizer.weight_decay follow the workload's recipe unless set."""
    spec = resolve(compose_config(["workload=tiny_gpt", f"results_dir={tmp_path}"]))
    assert spec.cfg.train.epochs == REGISTRY["tiny_gpt"].Config().epochs == 5
    assert spec.cfg.optimizer.weight_decay == 0.0 == spec.summary()["weight_decay"]
    spec = resolve(compose_config(["train.epochs=3", f"results_dir={tmp_path}"]))
    assert spec.summary()["epochs"] == 3


def test_the_spec_resolves_what_follows_from_the_config(tmp_path):
    spec = resolve(
        compose_config(["workers=4", "batch.global=256", "lr_rule=sqrt", f"results_dir={tmp_path}"])
    )
    assert (spec.workers, spec.per_worker_batch, spec.global_batch) == (4, 64, 256)
    assert spec.peak_lr == pytest.approx(0.1 * (256 / 32) ** 0.5) and spec.lr_exponent == 0.5
    assert spec.device == "cpu" and spec.backend == "gloo" and spec.processes == 4
    simulated = resolve(compose_config(["mode=simulated", "workers=8", f"results_dir={tmp_path}"]))
    assert simulated.processes == 1


def test_what_is_measured_is_in_the_run_id_and_where_results_go_is_not(tmp_path):
    def run_id(*overrides: str) -> str:
        return resolve(compose_config([f"results_dir={tmp_path}", *overrides])).run_id

    base = run_id()
    assert run_id(f"results_dir={tmp_path / 'elsewhere'}") == base
    assert run_id("ddp.timeout_s=5") == run_id("noise_scale.every=7") == base
    assert run_id("data.load_timeout_s=5") == base  # and run ids from before it existed stand
    assert run_id("hardware.tag=box-b") != base  # another machine's result never stands in
    assert run_id("repeat=1").endswith(run_id("repeat=1")[-10:]) and "-r1-" in run_id("repeat=1")
    assert run_id("timing.comm_every=5") != base


def test_planning_without_writing_creates_nothing(tmp_path):
    from dpsuite.conf.compose import plan

    target = tmp_path / "not-yet"
    plan([f"results_dir={target}"], multirun=False, writing=False)
    assert not target.exists()
    plan([f"results_dir={target}"], multirun=False)
    assert target.is_dir()


def test_identity_drops_the_default_strategy_and_the_batch_spelling(tmp_path):
    spec = resolve(compose_config([f"results_dir={tmp_path}", "workers=2"]))
    ident = run_identity(spec.config, spec.workers, spec.global_batch)
    assert "sync" not in ident and "batch" not in ident
    assert ident["global_batch"] == 64 and "results_dir" not in ident


def test_a_broken_bound_names_the_key_that_was_set(tmp_path):
    with pytest.raises(UserError, match="workload.epochs must be an integer >= 1, got 0"):
        resolve(compose_config(["workload.epochs=0", f"results_dir={tmp_path}"]))
    with pytest.raises(UserError, match="train.epochs must be an integer >= 1, got 0"):
        resolve(compose_config(["train.epochs=0", f"results_dir={tmp_path}"]))
