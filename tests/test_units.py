"""Units where a notebook user finds them: the loaded frame's attrs, datetimes, Parquet field
metadata, and `dpsuite schema` covering the hardware fingerprint."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from dpsuite import results
from dpsuite.results import schema
from tests.conftest import REPO

REFERENCE = REPO / "results" / "reference" / "xeon-2core-cpu"


@pytest.fixture(scope="module")
def runs() -> pd.DataFrame:
    return results.load(REFERENCE / "scaling")


def test_every_loaded_column_has_its_meaning_and_unit_in_attrs(runs):
    described = [c for c in runs.columns if not c.startswith("config.")]  # run --help's
    assert [c for c in described if c not in runs.attrs["meanings"]] == []
    units = runs.attrs["units"]
    assert units["step_time_s"] == "s" and units["samples_per_s"] == "samples/s"
    assert units["peak_rss_mib"] == "MiB" and units["final_eval_acc"] == "fraction"
    assert units["hardware.cpus_usable"] == "count"


def test_timestamps_load_as_utc_datetimes(runs):
    assert isinstance(runs["started_at"].dtype, pd.DatetimeTZDtype)
    assert str(runs["started_at"].dt.tz) == "UTC"
    first = runs.iloc[0]
    record = results.read_json(Path(first["run_dir"]) / "run.json")
    assert first["started_at"] == pd.Timestamp(record["started_at"])
    assert (runs["finished_at"] >= runs["started_at"]).all()


def test_schema_covers_every_hardware_key(dpsuite, capsys):
    record = results.read_json(next(REFERENCE.rglob("run.json")))
    assert dpsuite("schema") == 0
    text = capsys.readouterr().out
    hardware = text.split("## run.json hardware", 1)[1].split("##", 1)[0]
    for key in record["hardware"]:
        assert f"| `{key}` |" in hardware, key
    # only a run across nodes lists them; only comm-bench counts kernels; the reference runs
    # were recorded before the boot id and load average were
    later = {"nodes", "kernels", "kernel_boot_id", "load_average"}
    assert set(schema.names(schema.HARDWARE)) - set(record["hardware"]) == later


def test_the_schema_page_is_what_dpsuite_schema_prints(dpsuite, capsys):
    """docs/results-schema.md is `dpsuite schema > docs/results-schema.md`, current."""
    assert dpsuite("schema") == 0
    assert (REPO / "docs" / "results-schema.md").read_text() == capsys.readouterr().out


# A code span listing names: `a, b, c` (a trailing `, ...` when the list is not complete).
NAME_LIST = re.compile(r"`([A-Za-z_][\w.]*(?:,\s+[A-Za-z_][\w.]*)+)(?:,\s+\.\.\.)?`")


def listed_names(page: str) -> list[list[str]]:
    """Every list of names the docs page spells out in a code span."""
    text = (REPO / "docs" / page).read_text()
    return [re.split(r",\s+", m) for m in NAME_LIST.findall(text)]


@pytest.mark.parametrize("page", ["results-and-exports.md", "comm-bench.md"])
def test_the_names_the_docs_list_are_the_schemas(page):
    every_name = {f.name for _, section in schema.SECTIONS for f in section}
    lists = listed_names(page)
    assert lists and [n for names in lists for n in names if n not in every_name] == []


def test_the_comm_bench_page_lists_every_csv_column():
    assert schema.names(schema.COMM_BENCH_ROWS) in listed_names("comm-bench.md")


def test_dpsuite_schema_shows_ranges_required_keys_and_comm_bench():
    text = schema.markdown()
    assert "| `final_test_acc` | fraction | float | [0, 1] |  |" in text
    assert "| `workers` | count | int | >= 1 | yes |" in text
    assert "| `comm_fraction` | fraction | float | <= 1 |  |" in text
    assert "## comm_bench.json" in text and "| `busbw_GBps` | GB/s | float | >= 0 | yes |" in text


def test_parquet_columns_carry_their_units(dpsuite, tmp_path):
    pytest.importorskip("pyarrow", reason="the [parquet] extra is not installed")
    import pyarrow.parquet as pq

    run_dir = next(REFERENCE.joinpath("scaling").rglob("run.json")).parent
    tree = tmp_path / "results"
    shutil.copytree(run_dir, tree / run_dir.name)
    assert dpsuite("export", "parquet", str(tree)) == 0
    fields = pq.read_schema(tree / "runs.parquet")
    assert fields.field("step_time_s").metadata == {
        b"unit": b"s",
        b"meaning": b"median step time (max across ranks per step)",
    }
    # nested names are exported with __ for SQL (hardware.cpu_count in dpsuite.results.load);
    # the unit follows the renamed column
    assert fields.field("hardware__cpu_count").metadata[b"unit"] == b"count"
    assert str(fields.field("started_at").type) == "timestamp[us, tz=UTC]"
    assert (
        pq.read_schema(tree / "epochs.parquet").field("eval_acc").metadata[b"unit"] == b"fraction"
    )
    back = pd.read_parquet(tree / "runs.parquet")  # pandas restores the attrs
    assert back.attrs["units"]["samples_per_s"] == "samples/s"
    assert back.attrs["meanings"]["wall_time_s"] == "the run's wall time, setup included"
