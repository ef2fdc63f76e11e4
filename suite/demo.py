"""`dpsuite demo`: the first thing to run on a new machine."""

from __future__ import annotations

from suite import results

DEMO_OVERRIDES = [
    "workload=mnist1d_mlp",
    "workload.num_samples=20000",
    "workers=2",
    "batch.per_worker=32",
    "lr_rule=linear_warmup",
    "train.epochs=3",
    "results_dir=results/demo",
]


def run_demo(extra: list[str]) -> int:
    """A small 2-worker DDP run, then its summary."""
    from suite.cli import _run

    code = _run([*DEMO_OVERRIDES, *extra])
    frame = results.load("results/demo")
    cols = [
        "run_id",
        "status",
        "workers",
        "global_batch",
        "samples_per_s",
        "step_time_s",
        "final_eval_acc",
        "wall_time_s",
    ]
    print()
    print(frame[[c for c in cols if c in frame.columns]].to_string(index=False))
    return code
