"""The scaling model against published multi-GPU scaling (``published.yaml``).

Each entry gives what a user would give the model (a hardware profile, parameter count, per-GPU
batch, bucket size, single-GPU throughput) and the efficiency the publication reports; the model
predicts the efficiency from the first, and the second is only put beside it.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import yaml

from suite.analysis.scaling.compute import from_throughput
from suite.analysis.scaling.model import BYTES_PER_PARAM, MIB, ScalingModel
from suite.analysis.scaling.profiles import load_profile

PUBLISHED = Path(__file__).with_name("published.yaml")


def predicted_efficiency(entry: dict) -> float:
    """Throughput per GPU at ``workers`` over that at ``baseline_workers``, predicted."""
    model = ScalingModel(
        topology=load_profile(entry["profile"]).topology,
        compute=from_throughput(float(entry["single_gpu_samples_per_s"])),
        grad_bytes=float(entry["params"]) * BYTES_PER_PARAM["fp32"],  # all trained in fp32
        bucket_bytes=float(entry["bucket_mb"]) * MIB,
    )
    batch = int(entry["batch"])
    return model.step_s(int(entry["baseline_workers"]), batch) / model.step_s(
        int(entry["workers"]), batch
    )


def published_table(path: Path = PUBLISHED) -> pd.DataFrame:
    """One row per published result: label, hardware, published and predicted efficiency."""
    rows = []
    for entry in yaml.safe_load(path.read_text()):
        predicted = predicted_efficiency(entry)
        rows.append(
            {
                "label": entry["label"],
                "publication": entry["publication"],
                "profile": entry["profile"],
                "workers": int(entry["workers"]),
                "baseline_workers": int(entry["baseline_workers"]),
                "published_efficiency": float(entry["published_efficiency"]),
                "predicted_efficiency": predicted,
                "difference_points": 100 * (predicted - float(entry["published_efficiency"])),
            }
        )
    return pd.DataFrame(rows)
