"""What `dpsuite report` writes and refuses: its default directory, plots it no longer draws
removed, the same bytes from the same results, and one line for bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpsuite.analysis.report import build
from tests import report_trees as trees
from tests.conftest import run_subprocess
from tests.report_pages import (
    CONVERGENCE_PLOTS,
    NOISE_SCALE_PLOTS,
    TARGET_PLOTS,
    assert_valid_images,
    html_images,
)


def test_default_out_and_stale_plots_removed(dpsuite, capsys, tmp_path, monkeypatch):
    res = tmp_path / "mybox"
    trees.write_convergence(res)
    monkeypatch.chdir(tmp_path)
    assert dpsuite("report", "mybox") == 0
    out = tmp_path / "reports" / "mybox"
    assert "report written to reports/mybox/index.html" in capsys.readouterr().out
    assert assert_valid_images(out) == CONVERGENCE_PLOTS | TARGET_PLOTS | NOISE_SCALE_PLOTS
    # A later report into the same place does not keep plots that no longer apply.
    for run in res.iterdir():
        if "-w1-" not in run.name:
            for f in run.iterdir():
                f.unlink()
            run.rmdir()
    (out / "notes.png").write_bytes(b"the user's own file")
    assert dpsuite("report", "mybox") == 0
    assert html_images(out) == []
    assert {p.name for p in out.glob("*.png")} == {"notes.png"}
    assert "No plot applies" in (out / "index.md").read_text()


def test_the_same_results_give_the_same_report_byte_for_byte(tmp_path):
    """A committed report changes only where its numbers do: no dates, no random SVG ids."""
    root = tmp_path / "res"
    trees.write_scaling(root)
    first = build.build_report(root, tmp_path / "one").out
    second = build.build_report(root, tmp_path / "two").out
    names = sorted(p.name for p in first.iterdir())
    assert any(n.endswith(".svg") for n in names)
    assert names == sorted(p.name for p in second.iterdir())
    for name in names:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


def bad_dirs(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    empty = tmp_path / "empty"
    empty.mkdir()
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    only_corrupt = tmp_path / "corrupt"
    (only_corrupt / "r").mkdir(parents=True)
    (only_corrupt / "r" / "run.json").write_text("{not json")
    return {
        "missing": (tmp_path / "nope", "results directory not found"),
        "file": (a_file, "not a directory"),
        "empty": (empty, "no results to report"),
        "corrupt": (only_corrupt, "1 left out: skipping unreadable"),
    }


@pytest.mark.parametrize("case", ["missing", "file", "empty", "corrupt"])
@pytest.mark.parametrize("command", ["report", "compare"])
def test_bad_dirs_one_line(dpsuite, capsys, tmp_path, case, command):
    path, message = bad_dirs(tmp_path)[case]
    out = tmp_path / "out"
    assert dpsuite(command, str(path), "--out", str(out)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if line.startswith("dpsuite: error: ")]
    assert len(errors) == 1 and message in errors[0], err
    assert not (out / "index.html").exists()


def test_bad_arguments_one_line(dpsuite, capsys):
    assert dpsuite("report") == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("dpsuite: error: report: ")
    assert dpsuite("compare", "--frobnicate") == 2
    assert capsys.readouterr().err.strip().count("\n") == 0


def test_unwritable_out_is_one_line(dpsuite, capsys, convergence_tree, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert dpsuite("report", str(convergence_tree), "--out", str(blocker / "rep")) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "cannot write the report" in err


def test_missing_dir_exit_code_as_a_user_sees_it(tmp_path):
    proc = run_subprocess("report", str(tmp_path / "nowhere"), timeout=120)
    assert proc.returncode == 2
    assert (
        proc.stderr.strip()
        == f"dpsuite: error: results directory not found: {tmp_path / 'nowhere'}"
    )
