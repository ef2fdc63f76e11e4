"""Hostile results trees: every reader (load, load_epochs, load_steps, report, compare, predict,
export) goes through one gate, and every writer of a report or an export fails in one line,
deleting nothing it did not write. Each case starts from real runs of the real CLI."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pandas as pd
import pytest

from dpsuite import results
from dpsuite.cli.main import main
from dpsuite.results import gate, owned, schema
from tests.conftest import REPO, SMALL, run_subprocess

TINY = [*SMALL, "train.max_steps=4", "timing.warmup_steps=1", "timing.calibration_steps=0"]


@pytest.fixture(scope="session")
def measured(tmp_path_factory) -> Path:
    """Real runs of one config on two machines (tags a and b), each made by `dpsuite run`."""
    root = tmp_path_factory.mktemp("measured")
    for tag in ("box-a", "box-b"):
        args = ["run", *TINY, "workers=1", f"hardware.tag={tag}", f"results_dir={root / tag}"]
        assert main(args) == 0
    return root


@pytest.fixture
def tree(measured, tmp_path) -> Path:
    """A private copy of the measured runs."""
    copy = tmp_path / "results"
    shutil.copytree(measured, copy)
    return copy


def run_dir_of(root: Path) -> Path:
    [run] = [p.parent for p in root.rglob("run.json")]
    return run


def tamper(run_dir: Path, **changes) -> None:
    """Change keys of a run.json (dotted keys reach into mappings), as a hand would."""
    rec = json.loads((run_dir / "run.json").read_text())
    for dotted, value in changes.items():
        *parents, leaf = dotted.split("__")
        node = rec
        for p in parents:
            node = node[p]
        node[leaf] = value
    (run_dir / "run.json").write_text(json.dumps(rec))  # NaN/Infinity as Python writes them


def loaded(path: Path) -> tuple[list[str], list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        frame = results.load(path)
    return list(frame.get("run_id", [])), [str(w.message) for w in caught]


DAMAGE = {
    "pid-text": ({"status": "running", "pid": "abc"}, "pid is str"),
    "pid-huge": ({"status": "running", "pid": 99999999999}, "pid 99999999999 is not a process"),
    "gns-scalar": ({"metrics__grad_noise_scale": 3.5}, "metrics.grad_noise_scale is float"),
    "seed-huge": ({"seed": 99999999999999999999}, "seed is 99999999999999999999"),
    "nan": ({"metrics__samples_per_s": float("nan")}, "metrics.samples_per_s is nan"),
    "inf": ({"metrics__samples_per_s": float("inf")}, "metrics.samples_per_s is inf"),
    "negative-acc": ({"metrics__final_eval_acc": -5000}, "outside [0, 1]"),
    "1e308": ({"metrics__samples_per_s": 1e308}, "not a measurement"),
    "version-text": ({"schema_version": "2", "config__seed": 5}, "schema_version is str"),
    "version-99": ({"schema_version": 99}, "schema_version 99 is not one"),
    "version-1-edited": ({"schema_version": 1, "config__seed": 5}, "does not hash to its run id"),
    "config-null": ({"config": None, "workers": 64}, "config is missing"),
    "extra-rate": ({"samples_per_s": 123}, "unknown key samples_per_s"),
    "extra-acc": ({"final_eval_acc": 0.99}, "unknown key final_eval_acc"),
    "bad-status": ({"status": "done"}, "status 'done'"),
    "tag-lines": ({"hardware__tag": "a\nb | c"}, "hardware.tag 'a\\nb | c' is not a machine name"),
    "test-acc-5": ({"metrics__final_test_acc": 5}, "metrics.final_test_acc is 5, outside [0, 1]"),
    "mfu-2": ({"metrics__mfu": 2.0}, "metrics.mfu is 2.0, outside [0, 1]"),
    "hardware-text-count": ({"hardware__cpu_count": "many"}, "hardware.cpu_count is str"),
    "hardware-negative": ({"hardware__accelerator_count": -1}, "accelerator_count is -1, below 0"),
    "hardware-unknown": ({"hardware__gpus": 8}, "unknown key hardware.gpus"),
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_a_damaged_record_is_skipped_with_one_warning_naming_file_and_field(tree, case):
    changes, reason = DAMAGE[case]
    run = run_dir_of(tree / "box-a")
    tamper(run, **changes)
    ids, notes = loaded(tree)
    assert run.name not in ids and len(ids) == 1, "the other machine's run still loads"
    [note] = notes
    assert str(run / "run.json") in note and reason in note


@pytest.mark.parametrize("case", ["pid-text", "gns-scalar", "1e308", "seed-huge"])
def test_every_reader_survives_a_damaged_record(tree, tmp_path, capsys, case):
    """report, compare, predict and the exports run on: the damaged run is left out."""
    tamper(run_dir_of(tree / "box-b"), **DAMAGE[case][0])
    assert main(["report", str(tree), "--out", str(tmp_path / "rep")]) == 0
    summary = (tmp_path / "rep" / "summary.csv").read_text()
    assert "box-a" in summary and "box-b" not in summary
    compared = ["compare", str(tree / "box-a"), str(tree / "box-b"), "--out", str(tmp_path / "c")]
    assert main(compared) == 2  # box-b has no trusted run left: one line, no traceback
    assert main(["export", "parquet", str(tree)]) == 0
    assert main(["export", "tensorboard", str(tree), "--out", str(tmp_path / "tb")]) == 0
    assert main(["predict", str(tree)]) == 2  # one workers=1 run, no comm-bench: nothing to fit
    err = capsys.readouterr().err
    assert "Traceback" not in err and "dpsuite: error: nothing to fit" in err
    assert f"dpsuite: error: no results to report in {tree / 'box-b'} (1 left out: skipping" in err


def test_compare_never_shows_a_ratio_of_a_damaged_rate(tree, tmp_path, capsys):
    tamper(run_dir_of(tree / "box-b"), metrics__samples_per_s=1e308)
    out = str(tmp_path / "c")
    code = main(
        ["compare", str(tree / "box-a"), str(tree / "box-b"), "--out", out, "--fail-below", "0.9"]
    )
    captured = capsys.readouterr()
    assert code == 2 and "no results to report in" in captured.err  # never "exit 0"
    assert "inf" not in captured.out and "e+30" not in captured.out


def test_load_epochs_and_steps_read_each_trusted_run_once(tree):
    run = run_dir_of(tree / "box-a")
    shutil.copytree(run, tree / "again" / run.name)  # the same run twice
    edited = run_dir_of(tree / "box-b")
    tamper(edited, config__seed=3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        epochs, steps = results.load_epochs(tree), results.load_steps(tree)
    assert set(epochs["run_id"]) == {run.name} == set(steps["run_id"])
    assert len(epochs) == len(results.load_epochs(run))
    notes = " ".join(str(w.message) for w in caught)
    assert "already read from another directory" in notes and "does not hash" in notes


def test_a_fifo_named_run_json_is_skipped_not_waited_for(tree, tmp_path):
    fifo_dir = tree / "fifo-run"
    fifo_dir.mkdir()
    os.mkfifo(fifo_dir / "run.json")
    os.mkfifo(fifo_dir / "epochs.csv")
    done = run_subprocess("report", str(tree), "--out", str(tmp_path / "rep"), timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"skipping {fifo_dir / 'run.json'}: not a regular file" in done.stderr


UNREADABLE = """
import os, sys, warnings
from dpsuite import results  # imported as root: the interpreter's files may be root's only
results.load(sys.argv[2])
os.setgid(65534); os.setuid(65534)  # nobody: no root override of mode 000
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    frame = results.load(sys.argv[1])
print(len(frame)); print(*[str(w.message) for w in caught], sep="\\n")
"""


def test_an_unreadable_run_directory_is_a_warning_not_silence(tree):
    if os.geteuid() != 0:
        pytest.skip("needs root to run the reader as another user (mode 000 binds every user)")
    shared = Path(os.environ.get("TMPDIR", "/tmp")) / f"dpsuite-unreadable-{os.getpid()}"
    shutil.copytree(tree, shared)
    try:
        for d in [shared, *[p for p in shared.rglob("*") if p.is_dir()]]:
            d.chmod(0o755)
        for f in shared.rglob("*"):
            if f.is_file():
                f.chmod(0o644)
        hidden = run_dir_of(shared / "box-b")
        hidden.chmod(0o000)
        probe = subprocess.run(
            [sys.executable, "-c", UNREADABLE, str(shared), str(shared / "box-a")],
            capture_output=True,
            text=True,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO), "HOME": "/tmp"},
            timeout=120,
        )
        lines = probe.stdout.splitlines()
        assert probe.returncode == 0, probe.stderr
        assert lines[0] == "1", lines
        assert f"skipping unreadable directory {hidden}: Permission denied" in lines[1:]
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def test_a_symlinked_machine_or_run_directory_is_read_once(tree, tmp_path, capsys):
    """A machine directory and a run directory that are symlinks are read by report and export;
    a link back up the tree (a loop) is read once and named in a warning."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.move(tree / "box-b", elsewhere / "box-b")
    (tree / "box-b").symlink_to(elsewhere / "box-b")
    run_a = run_dir_of(tree / "box-a")
    shutil.move(run_a, elsewhere / run_a.name)
    run_a.symlink_to(elsewhere / run_a.name)
    (tree / "box-a" / "loop").symlink_to(tree)
    ids, notes = loaded(tree)
    assert len(ids) == 2
    assert notes == [f"skipping {tree / 'box-a' / 'loop'}: a link to a directory already read"]
    assert main(["report", str(tree), "--out", str(tmp_path / "rep")]) == 0
    summary = (tmp_path / "rep" / "summary.csv").read_text()
    assert "box-a" in summary and "box-b" in summary
    assert main(["export", "parquet", str(tree)]) == 0
    assert len(pd.read_parquet(tree / "runs.parquet")) == 2
    assert len(pd.read_parquet(tree / "epochs.parquet")["run_id"].unique()) == 2


def test_comm_bench_results_are_gated(tmp_path):
    bench = tmp_path / "comm_bench" / "b1"
    bench.mkdir(parents=True)
    (bench / "comm_bench.json").write_text(json.dumps({"bench_id": "b1", "world_size": 2}))
    header = "collective,size_bytes,count,dtype,time_us,algbw_GBps,busbw_GBps,errors\n"
    (bench / "comm_bench.csv").write_text(header + "all_reduce,1024,256,fp32,inf,0.1,0.1,0\n")
    with pytest.warns(UserWarning, match="time_us is inf in a row"):
        assert results.load_comm_bench(tmp_path).empty


# ---- every field of the schema, as the gate holds it -----------------------------------------
def fields_below(fields: tuple[schema.Field, ...], path: tuple[str, ...] = ()):
    """(path of keys, field) of every field and, below a mapping the schema describes, its keys'."""
    for field in fields:
        yield (*path, field.name), field
        yield from fields_below(field.fields, (*path, field.name))


def nested(path: tuple[str, ...], value) -> dict:
    """``{"a": {"b": value}}`` for the path ``("a", "b")``."""
    for key in reversed(path):
        value = {key: value}
    return value


# The keys a record cannot be checked without (as the schema's required RUN fields), valid.
REQUIRED = {"schema_version": 2, "run_id": "r", "status": "complete", "workload": "mnist1d_mlp"}
REQUIRED |= {"mode": "ddp", "workers": 2, "global_batch": 64, "lr_rule": "naive", "seed": 0}
REQUIRED |= {"config": {}}


def record_with(path: tuple[str, ...], value) -> dict:
    """A record the gate accepts, but for ``value`` at ``path``."""
    return {**REQUIRED, **nested(path, value)}


def refusal(path: tuple[str, ...], what: str) -> str:
    """The start of the gate's message for the value at ``path``, as a regular expression."""
    return "^" + re.escape(f"{'.'.join(path)} is {what}")


def outside(fields: tuple[schema.Field, ...]) -> list:
    """(path, value) just outside every declared bound, and far beyond any measured quantity."""
    cases = []
    for path, field in fields_below(fields):
        if field.least is not None:
            cases.append((path, field.least - 1))
        if field.most is not None:
            cases.append((path, field.most + 1))
        if field.measured and field.numeric:
            cases.append((path, 10 * schema.MAX_MAGNITUDE))
    return cases


ANOTHER_TYPE = {"int": "5", "float": "fast", "str": 5, "bool": 1, "mapping": [1], "list": {}}


def test_the_record_the_field_cases_start_from_is_trusted():
    assert set(REQUIRED) == {f.name for f in schema.RUN if f.required}
    gate.check_record(record_with(("metrics", "grad_noise_scale", "final"), 1.0))
    gate.check_comm_meta(nested(("hardware", "cpu_count"), 2))


@pytest.mark.parametrize("path,value", outside(schema.RUN), ids=str)
def test_the_gate_refuses_a_value_outside_its_fields_range(path, value):
    with pytest.raises(gate.Untrusted, match=refusal(path, f"{value!r}, ")):
        gate.check_record(record_with(path, value))


@pytest.mark.parametrize("path,field", list(fields_below(schema.RUN)), ids=str)
def test_the_gate_refuses_a_value_of_another_type(path, field):
    wrong = ANOTHER_TYPE[field.type]
    with pytest.raises(gate.Untrusted, match=refusal(path, f"{type(wrong).__name__} ")):
        gate.check_record(record_with(path, wrong))


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_the_gate_refuses_a_record_without_a_required_key(name):
    rec = record_with(("metrics", "samples_per_s"), 1.0)
    del rec[name]
    with pytest.raises(gate.Untrusted, match=f"^{name} is missing$"):
        gate.check_record(rec)


@pytest.mark.parametrize("path,value", outside(schema.COMM_BENCH_META), ids=str)
def test_comm_bench_meta_outside_its_range_is_refused(path, value):
    with pytest.raises(gate.Untrusted, match=refusal(path, f"{value!r}, ")):
        gate.check_comm_meta(nested(path, value))


@pytest.mark.parametrize("path,field", list(fields_below(schema.COMM_BENCH_META)), ids=str)
def test_comm_bench_meta_of_another_type_is_refused(path, field):
    wrong = ANOTHER_TYPE[field.type]
    with pytest.raises(gate.Untrusted, match=refusal(path, f"{type(wrong).__name__} ")):
        gate.check_comm_meta(nested(path, wrong))


COMM_ROW = {"collective": "all_reduce", "size_bytes": 1024, "count": 256, "dtype": "fp32"}
COMM_ROW |= {"time_us": 10.0, "algbw_GBps": 0.1, "busbw_GBps": 0.1, "errors": 0}


def comm_cases() -> list:
    """(column, cell) for every numeric column: text, infinite, below its least (at it, where
    it is an exclusive bound), not whole."""
    cases = []
    for field in schema.COMM_BENCH_ROWS:
        if field.numeric:
            cases += [(field.name, "fast"), (field.name, "inf"), (field.name, "")]
            cases += [(field.name, str(field.least - 1))] if field.least is not None else []
            cases += [(field.name, str(field.least))] if field.strict else []  # time_us = 0
            cases += [(field.name, "1.5")] if field.type == "int" else []
    return cases


def write_bench(root: Path, row: dict) -> Path:
    bench = root / "comm_bench" / "b1"
    bench.mkdir(parents=True)
    (bench / "comm_bench.json").write_text(json.dumps({"bench_id": "b1", "world_size": 2}))
    (bench / "comm_bench.csv").write_text(",".join(row) + "\n" + ",".join(map(str, row.values())))
    return bench


def test_the_comm_bench_row_the_cases_start_from_is_read(tmp_path):
    write_bench(tmp_path, COMM_ROW)
    assert set(schema.numeric(schema.COMM_BENCH_ROWS)) <= set(COMM_ROW)
    assert len(results.load_comm_bench(tmp_path)) == 1


@pytest.mark.parametrize("column,cell", comm_cases())
def test_a_comm_bench_csv_with_a_bad_number_in_any_numeric_column_is_left_out(
    tmp_path, column, cell
):
    write_bench(tmp_path, {**COMM_ROW, column: cell})
    with pytest.warns(UserWarning, match=f"comm_bench/b1: {column} is .* in a row, not a finite"):
        assert results.load_comm_bench(tmp_path).empty


def test_a_comm_bench_csv_with_an_unknown_column_is_left_out(tmp_path):
    write_bench(tmp_path, {**COMM_ROW, "speed": 3})
    with pytest.warns(UserWarning, match="unknown column speed"):
        assert results.load_comm_bench(tmp_path).empty


def test_the_gate_holds_no_table_of_field_names():
    """Every field's rules are the schema's: no set, tuple, list or dict of its names in gate.py."""
    every_name = {f.name for _, section in schema.SECTIONS for _, f in fields_below(section)}
    tree = ast.parse(Path(gate.__file__).read_text())
    tables = [n for n in ast.walk(tree) if isinstance(n, (ast.Set, ast.Tuple, ast.List, ast.Dict))]
    named = {
        c.value
        for table in tables
        for c in ast.walk(table)
        if isinstance(c, ast.Constant) and c.value in every_name
    }
    assert named == set()


# ---- writers ----------------------------------------------------------------------------------


def test_report_keeps_the_users_files_and_removes_only_its_own_stale_ones(tree, tmp_path):
    out = tmp_path / "figures"
    out.mkdir()
    mine = {"throughput_paper_fig3.png": b"user's figure", "efficiency-notes.svg": b"<svg/>"}
    for name, data in mine.items():
        (out / name).write_bytes(data)
    owned.begin(out)
    owned.write(out / "steps_to_target.png", b"a plot an earlier report wrote")
    owned.finish(out)
    assert main(["report", str(tree), "--out", str(out)]) == 0
    assert main(["report", str(tree), "--out", str(out)]) == 0
    for name, data in mine.items():
        assert (out / name).read_bytes() == data
    assert not (out / "steps_to_target.png").exists(), "its own stale plot is removed"
    listed = json.loads((out / owned.MANIFEST).read_text())["files"]
    assert "index.html" in listed and not set(mine) & set(listed)


@pytest.fixture
def full_disk(tmp_path):
    """A 64 KiB tmpfs, nearly full (root only)."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a tmpfs to fill needs root")
    mnt = tmp_path / "full"
    mnt.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)])
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        (mnt / "filler").write_bytes(b"\0" * 60_000)
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


FULL_DISK_COMMANDS = {
    "report": ["report", "{tree}", "--out", "{out}"],
    "tensorboard": ["export", "tensorboard", "{tree}", "--out", "{out}"],
    "comm-bench": [
        "comm-bench",
        "--workers",
        "1",
        "--sizes",
        "1K:4M",
        "--iters",
        "1",
        "--warmup",
        "0",
        "--results-dir",
        "{out}",
    ],
}


@pytest.mark.parametrize("command", sorted(FULL_DISK_COMMANDS))
def test_a_full_disk_is_one_line_and_leaves_no_empty_file(tree, full_disk, capsys, command):
    args = [a.format(tree=tree, out=full_disk / "out") for a in FULL_DISK_COMMANDS[command]]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("dpsuite: error: cannot write ")
    assert "No space left on device" in err
    empty = [p for p in full_disk.rglob("*") if p.is_file() and p.stat().st_size == 0]
    assert [p.name for p in empty] in ([], [".dpsuite.lock"])  # the lock is a file by design
    assert not list(full_disk.rglob("comm_bench.csv")), "no half of a result stays"
    assert not [p for p in full_disk.rglob("*.tmp")]
