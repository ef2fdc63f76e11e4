"""`dpsuite export parquet|tensorboard|wandb|mlflow RESULTS_DIR`: results in other tools'
formats."""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

from dpsuite.cli.args import ArgParser

# the package each format needs, and the extra that installs it
PACKAGES = {
    "parquet": ("pyarrow", "parquet"),
    "tensorboard": ("tensorboard", "tensorboard"),
    "wandb": ("wandb", "wandb"),
    "mlflow": ("mlflow", "mlflow"),
}
FORMATS = tuple(PACKAGES)


def parser() -> ArgParser:
    p = ArgParser(
        prog="dpsuite export",
        description="Write a results tree's runs (and comm-bench results) as Parquet files, "
        "TensorBoard event files, offline W&B runs or MLflow runs. Reads the results files only.",
    )
    p.add_argument("format", choices=FORMATS, help="what to write")
    p.add_argument("results_dir", help="a results directory (any depth of run folders)")
    p.add_argument(
        "--out",
        help="tensorboard: the log directory (default RESULTS_DIR/tensorboard); wandb: where "
        "its wandb/ directory goes (default RESULTS_DIR); parquet: the directory of its files "
        "(default RESULTS_DIR); mlflow: a tracking URI or a local store directory (default "
        "./mlruns)",
    )
    p.add_argument(
        "--project",
        default="dpsuite",
        help="wandb: the project; mlflow: the experiment (default dpsuite)",
    )
    p.add_argument("--report", help="mlflow: a report directory attached to every run exported")
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
    elif a.format == "mlflow":
        export_to_mlflow(a, runs, root)
    else:
        from dpsuite.results.export.wandb_runs import export_wandb

        out = Path(a.out) if a.out else root
        written = export_wandb(runs, root, out, a.project)
        print(f"wrote {len(written)} offline runs to {out / 'wandb'}: wandb sync {out / 'wandb'}")
    return 0


def export_to_mlflow(a: argparse.Namespace, runs: list, root: Path) -> None:
    """Runs into an MLflow store: ./mlruns, --out DIR or a tracking URI."""
    from dpsuite.errors import UserError
    from dpsuite.results.export.mlflow_runs import export_mlflow

    report = Path(a.report) if a.report else None
    if report is not None and not report.is_dir():
        raise UserError(f"report directory not found: {report}")
    # MLflow's own default store, in the working directory: inside the results tree its copies
    # of run.json would read as copied runs
    out = a.out or "mlruns"
    written = export_mlflow(runs, root, out, a.project, report)
    ui = f"mlflow ui --backend-store-uri {out}"
    if "://" not in out and not out.startswith("sqlite:"):
        ui = f"MLFLOW_ALLOW_FILE_STORE=true {ui}"
    print(f"wrote {len(written)} runs to experiment {a.project} in {out}: {ui}")
