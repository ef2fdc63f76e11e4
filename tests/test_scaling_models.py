"""The scaling_models preset: its parts, part-scoped overrides, and (with torchvision) the whole
preset at CPU sizes, reported without accuracy."""

import pandas as pd
import pytest

from dpsuite.sweep.runner import part_overrides, planned
from dpsuite.workloads.configs.vision import torchvision_problem

PARTS = {"resnet50": "scaling_models_resnet50", "gpt2": "scaling_models_gpt2"}
# The CPU sizes docs/workloads.md gives for this preset.
CPU = [
    "device=cpu",
    "precision=fp32",
    "workers=1,2",
    "resnet50/workload.arch=resnet18",
    "resnet50/workload.image_size=32",
    "resnet50/batch.per_worker=16",
    "gpt2/workload.layers=2",
    "gpt2/workload.width=128",
    "gpt2/workload.heads=4",
    "gpt2/workload.context=128",
    "gpt2/batch.per_worker=8",
    "workload.num_samples=400",
    "train.max_steps=20",
    "timing.warmup_steps=3",
]


def test_part_overrides_reach_only_their_part():
    given = ["workers=1,2", "gpt2/workload.layers=2", "resnet50/workload.arch=resnet18"]
    given += ["hydra/launcher=slurm"]
    assert part_overrides(given, "gpt2", PARTS) == [
        "workers=1,2",
        "workload.layers=2",
        "hydra/launcher=slurm",
    ]
    assert part_overrides(given, "resnet50", PARTS)[1] == "workload.arch=resnet18"


def test_gpu_sizes_are_the_benchmarks_batches(tmp_path):
    # the GPU preset planned on this CPU host: its memory is not what the preset is sized for
    args = ["checks.memory=false", f"results_dir={tmp_path}"]
    (gpt2,) = planned("scaling_models_gpt2", args, writing=False)
    specs = list(gpt2.specs.values())
    assert [s.workers for s in specs] == [1, 2, 4, 8]
    assert {s.per_worker_batch for s in specs} == {12} and specs[0].cfg.precision == "bf16"
    assert specs[0].cfg.workload.size == "124M" and specs[0].cfg.workload.context == 1024


@pytest.mark.multiproc
@pytest.mark.skipif(torchvision_problem() is not None, reason=str(torchvision_problem()))
def test_the_preset_at_cpu_sizes_reports_throughput_not_accuracy(dpsuite, tmp_path):
    results, out = tmp_path / "results", tmp_path / "report"
    args = [*CPU, "hardware.peak_tflops=0.5", f"results_dir={results}"]
    assert dpsuite("sweep", "scaling_models", *args) == 0
    assert dpsuite("report", str(results), "--out", str(out)) == 0
    summary = pd.read_csv(out / "summary.csv")
    assert sorted(summary["workload"].unique()) == ["gpt2-2x128", "torchvision-resnet18"]
    assert (summary["status"] == "complete").all() and len(summary) == 4
    assert summary["mfu"].notna().all() and summary["final_eval_acc"].isna().all()
    text = (out / "index.md").read_text()
    assert "Synthetic data: accuracy not meaningful. 4 run(s)" in text
    assert "MFU_pct" in text and "peak_RSS_MiB" in text and "efficiency_pct" in text
