"""`dpsuite export parquet|tensorboard|wandb RESULTS_DIR`: results in other tools' formats."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

from dpsuite.cli.args import ArgParser

# the package each format needs, and the extra that installs it
PACKAGES = {
    "parquet": ("pyarrow", "parquet"),
    "tensorboard": ("tensorboard", "tensorboard"),
    "wandb": ("wandb", "wandb"),
}
FORMATS = tuple(PACKAGES)


def parser() -> ArgParser:
    p = ArgParser(
        prog="dpsuite export",
        description="Write a results tree's runs (and comm-bench results) as Parquet files, "
        "TensorBoard event files or offline W&B runs. Reads the results files only.",
    )
    p.add_argument("format", choices=FORMATS, help="what to write")
    p.add_argument("results_dir", help="a results directory (any depth of run folders)")
    p.add_argument(
        "--out",
        help="tensorboard: the log directory (default RESULTS_DIR/tensorboard); wandb: where "
        "its wandb/ directory goes (default RESULTS_DIR); parquet: the directory of its files "
        "(default RESULTS_DIR); mlflow: the tracking URI or mlruns directory (default "
        "RESULTS_DIR/mlruns)",
    )
    p.add_argument("--project", default="dpsuite", help="wandb: the project (default dpsuite)")
    return p


def export(args: list[str]) -> int:
    from dpsuite.results.export import tree

    a = parser().parse_args(args)
    root = tree.check_results_dir(a.results_dir)
    tree.require(*PACKAGES[a.format], a.format)  # before any work
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        runs = tree.read_runs(root)
    for warning in caught:
        if warning.category is UserWarning:
            print(f"dpsuite: warning: {warning.message}", file=sys.stderr)
    if a.format == "parquet":
        from dpsuite.results.export.parquet_files import export_parquet

        written = export_parquet(root, runs, Path(a.out) if a.out else None)
        print("\n".join(f"wrote {path}" for path in written))
    elif a.format == "tensorboard":
        from dpsuite.results.export.tensorboard_files import export_tensorboard

        out = Path(a.out) if a.out else root / "tensorboard"
        written = export_tensorboard(runs, root, out)
        print(f"wrote {len(written)} runs to {out}: tensorboard --logdir {out}")
    else:
        from dpsuite.results.export.wandb_runs import export_wandb

        out = Path(a.out) if a.out else root
        written = export_wandb(runs, root, out, a.project)
        print(f"wrote {len(written)} offline runs to {out / 'wandb'}: wandb sync {out / 'wandb'}")
    return 0
