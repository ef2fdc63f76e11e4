"""The gate's shortcuts for large trees answer as the long way does: the quick check of a plain
JSON value, and one walk of a tree shared by the readers of several kinds of file."""

from __future__ import annotations

import copy
import math
import warnings
from pathlib import Path

import pytest

from dpsuite.results import gate, schema, store

VALUES = [
    *(0, 1, -1, 7, 2**31, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 10**30),
    *(0.0, -0.0, 0.5, 1.0, 1.5, 32.0, -2.5, 1e18, 1.1e18, 1e19, 1e308, -1e308),
    *(math.nan, math.inf, -math.inf, True, False, "", "x", "32", [], [1], {}, {"a": 1}),
]


def every_field(fields: tuple[schema.Field, ...]) -> list[schema.Field]:
    return [f for field in fields for f in (field, *every_field(field.fields))]


FIELDS = every_field(schema.RUN) + every_field(schema.COMM_BENCH_META)


def verdict(check, *args) -> str | None:
    try:
        check(*args)
    except gate.Untrusted as exc:
        return str(exc)
    return None


@pytest.mark.parametrize("field", FIELDS, ids=lambda f: f.name)
def test_the_quick_check_of_a_value_says_what_the_full_check_says(field):
    for value in VALUES:
        quick = verdict(gate._check_fields, "", {field.name: value}, (field,))
        full = verdict(gate._check_value, field.name, value, field)
        assert quick == full, (field.name, value)


def walked(root: Path, names: tuple[str, ...]) -> tuple[list[list[Path]], list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        files = [gate.walk_files(root, name) for name in names]
    return files, [str(w.message) for w in caught]


def test_one_shared_walk_finds_and_warns_as_a_walk_per_kind_of_file(tmp_path):
    names = ("run.json", "comm_bench.json", "input_bench.json")
    for rel in ("a/r1/run.json", "a/r2/run.json", "b/c1/comm_bench.json", ".hidden/run.json"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("{}")
    (tmp_path / "a" / "loop").symlink_to(tmp_path)
    alone = walked(tmp_path, names)
    with gate.shared_walk(tmp_path, names):
        shared = walked(tmp_path, names)
    assert shared == alone
    assert [len(files) for files in alone[0]] == [2, 1, 0]
    assert (
        alone[1] == [f"skipping {tmp_path / 'a' / 'loop'}: a link to a directory already read"] * 3
    )
    assert walked(tmp_path, names) == alone  # the block over: each walk its own again


def test_the_run_identity_leaves_the_config_it_reads_as_it_was():
    config = {
        "seed": 1,
        "hardware": {"tag": "box"},
        "ddp": {"start_method": "spawn", "bucket_mb": 25},
        "data": {"pin_memory": True, "timeout_s": 5, "name": "x"},
        "optimizer": {"name": "sgd", "implementation": "auto"},
        "train": {"save_params": True, "epochs": 2},
        "timing": {"max_rank_steps": 9},
        "model": {"layers": [1, 2]},
    }
    before = copy.deepcopy(config)
    ident = store.run_identity(config, 2, 64)
    assert config == before
    assert ident["ddp"] == {"bucket_mb": 25} and ident["data"] == {"name": "x"}
    assert ident["optimizer"] == {"name": "sgd"} and ident["train"] == {"epochs": 2}
    assert ident["hardware_tag"] == "box" and "hardware" not in ident
