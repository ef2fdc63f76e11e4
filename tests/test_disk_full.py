"""Results that cannot be written: one clear line, never a torn run.json, finished runs kept.

The failures are real OS errors: a file size limit (RLIMIT_FSIZE, as a full disk: writes past it
fail with EFBIG) set on the sweeping process from its third run on, and /dev/full (ENOSPC).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dpsuite import results
from dpsuite.errors import ResultsWriteError
from tests.conftest import SMALL, run_subprocess

SWEEP = [*SMALL, "mode=simulated", "train.max_steps=3", "timing.calibration_steps=0"]


def test_a_sweep_that_cannot_write_stops_with_one_line_and_keeps_what_it_measured(tmp_path):
    out = tmp_path / "res"
    # Big enough for the manifest and a starting run.json, too small for a finished run.json.
    proc = run_subprocess(
        "run",
        "-m",
        *SWEEP,
        "seed=0,1,2,3",
        f"results_dir={out}",
        "+hydra.callbacks.disk._target_=tests.probes.FileSizeLimit",
        "+hydra.callbacks.disk.at_job=2",
        "+hydra.callbacks.disk.max_bytes=4700",
    )
    # (a) one line naming the file and the OS reason, non-zero exit, no traceback
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    third = out / next(d.name for d in out.iterdir() if "-s2-" in d.name)
    assert proc.stderr.strip() == (
        f"dpsuite: error: cannot write results to {third / 'run.json'}: File too large"
    )
    # (b) every run.json parses, the one that could not be replaced is its previous version,
    # and no temporary file is left behind
    records = {p.parent.name: json.loads(p.read_text()) for p in out.rglob("run.json")}
    assert len(records) == 3, "the sweep stopped: the fourth run never started"
    assert records[third.name]["status"] == "running"  # ...and reads as failed, its pid gone
    assert not list(out.rglob("*.tmp"))
    # (c) the runs measured before are kept; the manifest says the sweep did not finish
    frame = results.load(out)
    assert sorted(frame["status"]) == ["complete", "complete", "failed"]
    manifest = json.loads((out / "sweep.json").read_text())
    assert manifest["state"] == "interrupted"
    assert sorted(manifest["runs"].values()) == ["complete", "complete", "failed", "not run"]


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_no_space_left_is_a_results_write_error_naming_the_file():
    with pytest.raises(ResultsWriteError) as caught:
        results.append_csv(Path("/dev/full"), results.STEP_COLUMNS, [{"step": 1}])
    assert str(caught.value) == "cannot write results to /dev/full: No space left on device"
