"""Reading many runs' CSVs in one parse gives exactly what reading each file alone gives."""

import random
import shutil
import sys
import warnings
from pathlib import Path

import pandas as pd
import pytest

from dpsuite import results
from dpsuite.results.run_csvs import read_alone, read_many

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "bench"))
from readers_tree import write_tree  # noqa: E402

EPOCHS = (results.EPOCH_COLUMNS, list(results.schema.OPTIONAL_EPOCH_COLUMNS))
STEPS = (results.STEP_COLUMNS, list(results.schema.OPTIONAL_STEP_COLUMNS))

# Files a results tree can hold beside clean ones: each must read as it reads alone.
ODD_FILES = {
    "ints_only": "step,step_time_s,comm_s,comm_wait_s,lr\n1,2,0,0,1\n2,3,0,0,1\n",
    "ints_then_float": "step,step_time_s,comm_s,comm_wait_s,lr\n1,2,0,0,1\n2,3,0,0,1.5\n",
    "float_zeros": "step,step_time_s,comm_s,comm_wait_s,lr\n1,0.5,0.0,0.0,0.1\n",
    "damaged_row": "step,step_time_s,comm_s,comm_wait_s,lr\n1,0.5,,,0.1\nx,0.5,,,0.1\n",
    "text_cell": "step,step_time_s,comm_s,comm_wait_s,lr\n1,fast,,,0.1\n",
    "too_many_fields": "step,step_time_s,comm_s,comm_wait_s,lr\n1,0.5,,,0.1,9\n",
    "too_few_fields": "step,step_time_s,comm_s,comm_wait_s,lr\n1,0.5\n",
    "missing_column": "step,step_time_s,lr\n1,0.5,0.1\n",
    "header_only": "step,step_time_s,comm_s,comm_wait_s,lr\n",
    "empty": "",
    "quoted": 'step,step_time_s,comm_s,comm_wait_s,lr\n"1",0.5,,,0.1\n',
    "blank_line": "step,step_time_s,comm_s,comm_wait_s,lr\n1,0.5,,,0.1\n\n2,0.5,,,0.1\n",
    "no_final_newline": "step,step_time_s,comm_s,comm_wait_s,lr\n1,0.5,,,0.1",
    "reordered": "lr,step,step_time_s,comm_s,comm_wait_s\n0.1,1,0.5,,\n",
    "crlf_ints": "step,step_time_s,comm_s,comm_wait_s,lr\r\n1,2,0,0,1\r\n",
    "lone_cr": "step,step_time_s,comm_s,comm_wait_s,lr\r1,0.5,,,0.1\r",
    "nan_and_inf": "step,step_time_s,comm_s,comm_wait_s,lr\n1,inf,nan,,0.1\n",
    "not_utf8": b"step,step_time_s,comm_s,comm_wait_s,lr\n1,0.5,,,\xff\n",
    "byte_order_mark": "\ufeffstep,step_time_s,comm_s,comm_wait_s,lr\n1,0.5,,,0.1\n",
    "utf8_text_cell": "step,step_time_s,comm_s,comm_wait_s,lr\n1,0.5,,,0.1\n2,\u00e9,,,0.1\n",
}


def assert_same_as_alone(files: list[Path], kind: tuple[list[str], list[str]]) -> None:
    columns, optional = kind
    together = read_many(files, columns, optional)
    assert len(together) == len(files)
    for file, read in zip(files, together, strict=True):
        alone = read_alone(file, columns, optional)
        pd.testing.assert_frame_equal(read.frame, alone.frame, check_exact=True)
        assert read.notes == alone.notes


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tree")
    write_tree(root, 200)
    return root


def test_a_generated_tree_reads_as_its_runs_read_one_by_one(tree):
    dirs = sorted(p.parent for p in tree.rglob("run.json"))
    assert len(dirs) == 200
    assert_same_as_alone([d / "epochs.csv" for d in dirs], EPOCHS)
    assert_same_as_alone([d / "steps.csv" for d in dirs], STEPS)


@pytest.mark.parametrize("name", [*ODD_FILES, "absent", "a_directory"])
def test_an_odd_file_among_clean_ones_reads_as_it_reads_alone(tree, tmp_path, name):
    odd = tmp_path / f"{name}.csv"
    content = ODD_FILES.get(name, "")
    if name == "a_directory":
        odd.mkdir()
    elif isinstance(content, bytes):
        odd.write_bytes(content)
    elif name != "absent":
        odd.write_text(content, encoding="utf-8")
    files = [*sorted(tree.rglob("steps.csv"))[:20], odd]
    random.Random(name).shuffle(files)
    assert_same_as_alone(files, STEPS)


def test_a_damaged_file_warns_once_and_the_others_still_load(tree, tmp_path):
    run_dirs = sorted(p.parent for p in tree.rglob("run.json"))[:5]
    copies = []
    for run_dir in run_dirs:
        copies.append(tmp_path / run_dir.name)
        shutil.copytree(run_dir, copies[-1])
    (copies[2] / "epochs.csv").write_text("epoch,step\n1,x\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reads = results.epochs_of(copies)
    assert [len(r.notes) for r in reads] == [0, 0, 1, 0, 0]
    assert "missing columns" in reads[2].notes[0]
    assert all(len(r.frame) > 0 for i, r in enumerate(reads) if i != 2)
    assert not caught  # epochs_of gives the notes; the caller decides how to show them


def test_a_tree_loads_the_same_frames_as_its_runs_one_by_one(tree):
    together = results.load_steps(tree)
    dirs = [run_dir for run_dir, _ in results.gate.trusted_runs(tree)]
    alone = pd.concat([results.load_steps(d) for d in dirs], ignore_index=True)
    pd.testing.assert_frame_equal(together, alone, check_exact=True)


def test_clean_files_are_parsed_together_not_one_by_one(tree, monkeypatch):
    from dpsuite.results import run_csvs

    alone = []
    monkeypatch.setattr(run_csvs, "read_alone", lambda file, *a: alone.append(file))
    files = sorted(tree.rglob("steps.csv"))
    reads = read_many(files, *STEPS)
    assert len(reads) == len(files) and not alone


def stacked_frames(reads) -> pd.DataFrame:
    """What concatenating the reads' frames one by one gives (the reference joint_rows meets)."""
    return pd.concat([r.frame for r in reads if len(r.frame)], ignore_index=True)


def test_files_parsed_together_are_cut_into_frames_only_when_asked(tree, monkeypatch):
    from dpsuite.results import run_csvs

    cut = []
    split_off = run_csvs.split_off
    monkeypatch.setattr(run_csvs, "split_off", lambda *a: cut.append(a) or split_off(*a))
    reads = read_many(sorted(tree.rglob("steps.csv"))[:30], *STEPS)
    assert all(r.rows > 0 and not r.empty for r in reads) and not cut
    assert len(reads[0].frame) == reads[0].rows and len(cut) == 1  # that frame alone


def test_joint_rows_are_the_frames_one_after_another(tree):
    from dpsuite.results.run_csvs import joint_rows

    files = sorted(tree.rglob("epochs.csv"))[:40]
    reads = read_many(files, *EPOCHS, {"run_id": [f.parent.name for f in files]})
    together = joint_rows(reads)
    pd.testing.assert_frame_equal(together, stacked_frames(reads), check_exact=True)
    some = reads[3:9] + reads[20:25]  # parts of the joint frame, not the whole of it
    pd.testing.assert_frame_equal(joint_rows(some), stacked_frames(some), check_exact=True)


def test_joint_rows_are_none_where_a_file_was_read_alone(tree, tmp_path):
    from dpsuite.results.run_csvs import joint_rows

    odd = tmp_path / "steps.csv"
    odd.write_text(ODD_FILES["ints_only"])
    reads = read_many([*sorted(tree.rglob("steps.csv"))[:5], odd], *STEPS)
    assert joint_rows(reads) is None
    assert joint_rows(reads[:5]) is not None
