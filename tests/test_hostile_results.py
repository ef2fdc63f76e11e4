"""Hostile results trees: every reader (load, load_epochs, load_steps, report, compare, predict,
export) goes through one gate, and every writer of a report or an export fails in one line,
deleting nothing it did not write. Each case starts from real runs of the real CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from dpsuite import results
from dpsuite.cli.main import main
from dpsuite.results import owned
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


def test_comm_bench_results_are_gated(tmp_path):
    bench = tmp_path / "comm_bench" / "b1"
    bench.mkdir(parents=True)
    (bench / "comm_bench.json").write_text(json.dumps({"bench_id": "b1", "world_size": 2}))
    header = "collective,size_bytes,count,dtype,time_us,algbw_GBps,busbw_GBps,errors\n"
    (bench / "comm_bench.csv").write_text(header + "all_reduce,1024,256,fp32,inf,0.1,0.1,0\n")
    with pytest.warns(UserWarning, match="time_us is inf in a row"):
        assert results.load_comm_bench(tmp_path).empty


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
