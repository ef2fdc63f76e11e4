"""What a run and a sweep say on the console: caveats as a run starts, what it measured at its
end, and a sweep's table of throughput and efficiency."""

import os
import subprocess
import sys

import pytest

from dpsuite.measure.caveats import caveats
from dpsuite.sweep.measured import final_detail, sweep_table
from tests.conftest import REPO, SMALL

# gpt2 on random tokens: a throughput benchmark whose accuracy means nothing.
TINY_GPT2 = [
    "workload=gpt2",
    *(f"workload.{k}={v}" for k, v in (("layers", 2), ("width", 32), ("heads", 2))),
    *(f"workload.{k}={v}" for k, v in (("context", 16), ("vocab_size", 128))),
    "workload.num_samples=400",
]


def record(workers: int, samples_per_s: float, acc: float | None = 0.5, **config) -> dict:
    """A run.json of a sweep's run, as much of it as the end lines read."""
    return {
        "workload": "mnist1d_mlp",
        "workers": workers,
        "status": "complete",
        "synthetic_data": acc is None,
        "sync_label": config.get("sync", {}).get("name", "allreduce"),
        "config": {"workers": workers, "seed": 0, "results_dir": f"/r{workers}", **config},
        "metrics": {
            "samples_per_s": samples_per_s,
            "step_time_s": 64 * workers / samples_per_s,
            "outlier_steps": 0,
            "final_eval_acc": 0.0 if acc is None else acc,
        },
    }


def test_the_end_line_gives_throughput_median_step_and_meaningful_accuracy_only():
    line = final_detail(record(1, 25_000.0, acc=0.3425))
    assert line == "25,000 samples/s  median step 2.56 ms  eval_acc 34.25%"
    synthetic = final_detail({**record(1, 12.34, acc=None), "metrics": {"samples_per_s": 12.34}})
    assert synthetic == "12.3 samples/s" and "acc" not in synthetic
    failed = {"status": "failed", "error": "RuntimeError: boom", "metrics": {}}
    assert final_detail(failed, job_id="7") == "(job 7): RuntimeError: boom"


def test_the_sweep_table_compares_each_worker_count_with_its_one_worker_run():
    runs = [record(2, 30_000.0, acc=0.25), record(1, 20_000.0, acc=0.5)]
    runs.append(record(4, 40_000.0, acc=0.2, sync={"name": "bf16"}))  # no 1-worker run of it
    lines = sweep_table(runs).splitlines()
    assert lines[0].split() == [
        *("workload", "sync", "workers", "samples/s", "median", "step", "efficiency", "eval_acc")
    ]
    cells = [line.split() for line in lines[1:]]
    assert [c[1:3] for c in cells] == [["allreduce", "1"], ["allreduce", "2"], ["bf16", "4"]]
    assert cells[0][-2:] == ["100%", "50.00%"]
    assert cells[1][3] == "30,000" and cells[1][-2:] == ["75%", "25.00%"]  # 30k / (2 x 20k)
    assert cells[2][-2] == "-"


def test_the_sweep_table_has_no_accuracy_for_random_inputs_and_merges_repeats():
    runs = [record(1, 100.0, acc=None), record(1, 300.0, acc=None, repeat=1)]
    runs += [record(2, 150.0, acc=None), {"workload": "x", "metrics": "damaged"}]
    lines = sweep_table(runs).splitlines()
    assert "eval_acc" not in lines[0] and "runs" in lines[0] and len(lines) == 3
    assert lines[1].split()[1:4] == ["1", "2", "200"]  # the median of the two repeats
    assert lines[2].split()[-1] == "38%"  # 150 / (2 x 200)
    assert sweep_table([{"metrics": {}}]) == ""


def test_oversubscription_and_a_debug_build_are_caveats():
    hardware = {"oversubscribed": True, "workers_per_host": 6, "threads_per_worker": 1}
    [line] = caveats({**hardware, "cpus_usable": 2})
    assert line.startswith("oversubscribed: 6 workers x 1 threads on 2 usable cores")
    assert len(caveats({**hardware, "torch_debug_build": True})) == 2
    assert caveats({"oversubscribed": False, "torch_debug_build": False}) == []


def test_an_oversubscribed_run_warns_as_it_starts_and_ends_with_what_it_measured(tmp_path):
    cores = len(os.sched_getaffinity(0))
    args = [*SMALL, "train.max_steps=20", f"threads_per_worker={cores + 2}"]
    done = subprocess.run(
        [sys.executable, "-m", "dpsuite", "run", *args, f"results_dir={tmp_path}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # one stream: the order the user sees
        text=True,
        timeout=300,
        cwd=REPO,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert done.returncode == 0, done.stdout
    lines = done.stdout.splitlines()
    warned = [i for i, line in enumerate(lines) if "dpsuite: warning:" in line]
    assert len(warned) == 1 and "oversubscribed: 1 workers x" in lines[warned[0]]
    first_eval = next(i for i, line in enumerate(lines) if "] epoch " in line)
    assert warned[0] < first_eval
    assert "samples/s  median step" in lines[-1] and "eval_acc" in lines[-1]


def test_a_run_on_random_inputs_shows_no_accuracy(dpsuite, tmp_path, capsys):
    args = [*TINY_GPT2, "batch.per_worker=4", "train.max_steps=6", "timing.warmup_steps=1"]
    assert dpsuite("run", *args, "train.evals_per_epoch=1", f"results_dir={tmp_path}") == 0
    out = capsys.readouterr().out.splitlines()
    assert any("] epoch " in line and "eval_loss" in line for line in out)
    assert not any("acc" in line for line in out)
    assert "samples/s  median step" in out[-1]


@pytest.mark.multiproc
def test_a_sweep_ends_with_a_table_of_both_worker_counts(dpsuite, tmp_path, capsys):
    args = ["run", "-m", "workers=1,2", *SMALL, "train.max_steps=20", f"results_dir={tmp_path}"]
    assert dpsuite(*args, "timing.calibration_steps=2") == 0
    out = capsys.readouterr().out.splitlines()
    end = next(i for i, line in enumerate(out) if "2 runs: 2 complete" in line)
    header, one, two = (line.split() for line in out[end + 1 : end + 4])
    assert header[:3] == ["workload", "workers", "samples/s"] and "efficiency" in header
    assert one[1] == "1" and one[-2] == "100%"
    assert two[1] == "2" and two[-2].endswith("%") and two[-2] != "-"
