"""`dpsuite report` and `dpsuite compare` on synthetic results trees written by the real writer."""

from __future__ import annotations

import math
import statistics
import struct
import warnings
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dpsuite import results
from dpsuite.analysis.report import build, critical_batch_fit, data, output
from dpsuite.analysis.report.sections import comm as comm_section
from dpsuite.analysis.report.sections import convergence, model
from dpsuite.analysis.report.sections import scaling as scaling_section
from dpsuite.analysis.report.text import approx
from tests import report_trees as trees
from tests.conftest import run_subprocess

SCALING_PLOTS = {"throughput.png", "efficiency.png", "step_time_breakdown.png"}
CONVERGENCE_PLOTS = {"accuracy_vs_batch.png", "training_curves.png", "lr_schedule.png"}
TARGET_PLOTS = {"steps_to_target.png", "rule_efficiency.png"}
NOISE_SCALE_PLOTS = {"gradient_noise_scale.png", "critical_batch.png"}
TIME_PLOT = {"time_to_target.png"}  # with scaling runs of the same workload on the machine
COMM_PLOT = {"allreduce_bandwidth.png"}
SYNC_PLOTS = {"sync_throughput.png", "sync_bytes.png", "sync_tradeoff.png"}


class ImageSources(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.sources: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.sources.append(dict(attrs)["src"])


def html_images(report_dir: Path) -> list[str]:
    parser = ImageSources()
    parser.feed((report_dir / "index.html").read_text())
    return parser.sources


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from the PNG header (signature, then the IHDR chunk)."""
    blob = path.read_bytes()
    assert blob[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    length, kind = struct.unpack(">I4s", blob[8:16])
    assert kind == b"IHDR" and length == 13
    return struct.unpack(">II", blob[16:24])


def topics_of(report_dir: Path) -> dict[str, list[str]]:
    """The findings of index.md by topic (### headings under ## Findings)."""
    md = (report_dir / "index.md").read_text()
    if "## Findings\n" not in md:
        return {}
    section = md.split("## Findings\n", 1)[1].split("\n## ", 1)[0]
    topics: dict[str, list[str]] = {}
    for block in section.split("### ")[1:]:
        title, _, body = block.partition("\n")
        topics[title] = [line[2:] for line in body.splitlines() if line.startswith("- ")]
    return topics


def findings_of(report_dir: Path) -> list[str]:
    return [f for found in topics_of(report_dir).values() for f in found]


def headline_of(report_dir: Path) -> list[str]:
    """The bold bullets between the title block and the first section of index.md."""
    md = (report_dir / "index.md").read_text()
    top = md.split("\n## ", 1)[0]
    return [line[4:-2] for line in top.splitlines() if line.startswith("- **")]


def report(dpsuite, capsys, results_dir: Path, out: Path) -> tuple[Path, str]:
    assert dpsuite("report", str(results_dir), "--out", str(out)) == 0
    return out, capsys.readouterr().err


def assert_valid_images(report_dir: Path) -> set[str]:
    sources = html_images(report_dir)
    assert sources, "the report shows no plot"
    for src in sources:
        assert not Path(src).is_absolute() and "/" not in src, "images sit beside index.html"
        width, height = png_size(report_dir / src)
        assert width > 100 and height > 100
    md = (report_dir / "index.md").read_text()
    assert all(f"]({src})" in md for src in sources)
    assert {p.name for p in report_dir.glob("*.png")} == set(sources), "one PNG per plot"
    svgs = {p.stem for p in report_dir.glob("*.svg")}
    assert svgs == {Path(src).stem for src in sources}, "an SVG beside every PNG"
    for svg in report_dir.glob("*.svg"):
        assert svg.read_text().lstrip().startswith("<?xml") and "</svg>" in svg.read_text()
    return set(sources)


# ---- fixtures: each tree is written and reported once per module -----------------------------


@pytest.fixture(scope="module")
def scaling_tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("scaling")
    trees.write_scaling(root)
    trees.write_comm_bench(root)
    return root


@pytest.fixture(scope="module")
def convergence_tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("convergence")
    trees.write_convergence(root)
    return root


@pytest.fixture(scope="module")
def mixed_tree(tmp_path_factory) -> tuple[Path, dict[str, Path]]:
    root = tmp_path_factory.mktemp("mixed")
    trees.write_scaling(root)
    trees.write_convergence(root)
    trees.write_comm_bench(root)
    return root, trees.write_failures(root)


def expected_scaling_findings(label: str = "mnist1d_mlp · 32/worker") -> list[str]:
    t = trees.THROUGHPUT
    eff = {n: t[n] / (n * t[1]) for n in t}
    step8 = 8 * trees.PER_WORKER / t[8]
    exposed8 = step8 - trees.COMPUTE_S
    return [
        f"{label}: throughput goes from 1,000 samples/s on 1 worker to 5,200 samples/s on "
        f"8 workers, {t[8] / t[1]:.2f}× the speed ({100 * eff[8]:.0f} % scaling efficiency).",
        f"{label}: largest worker count with ≥ 80 % scaling efficiency: 4 ({100 * eff[4]:.0f} %).",
        f"{label}: exposed communication is {100 * exposed8 / step8:.1f} % of step time at 8 "
        f"workers ({1e3 * exposed8:.2f} of {1e3 * step8:.2f} ms); 50 % of the "
        f"{2e3 * exposed8:.2f} ms all-reduce is hidden behind compute.",
    ]


def expected_prediction() -> str:
    """The critical batch the convergence tree predicts: runs that reached 85 % only, each by its
    mean over windows (no pooled value there), band: nearest-rank 10th-90th percentile."""
    reached = [
        batch
        for by_batch in trees.ACCURACY.values()
        for batch, acc in by_batch.items()
        if acc is not None and acc >= trees.TARGET
        for _ in trees.SEEDS
    ]
    epochs = list(trees.GNS_BY_EPOCH)  # three windows: the 10th and 90th are the first and last
    mean = statistics.median(statistics.mean(trees.gns_at(e, b) for e in epochs) for b in reached)
    low = statistics.median(trees.gns_at(epochs[0], b) for b in reached)
    high = statistics.median(trees.gns_at(epochs[-1], b) for b in reached)
    two = lambda x: f"{float(f'{x:.2g}'):g}"  # noqa: E731
    return (
        f"the gradient noise scale of the {len(reached)} runs that reached 85 % (B_simple mean "
        f"over each run, median over runs) predicts a critical batch ≈ {two(mean)}, "
        f"{two(low)}–{two(high)} over training (10th–90th percentile)"
    )


def expected_accuracy_findings() -> list[str]:
    acc = trees.ACCURACY
    return [
        "Baseline: at global batch 32 the runs reach 91.0 % test accuracy (mean of 2 runs; "
        "standard deviation 1.4 points; 4 more runs under other rules train one of these runs "
        "again (at the base batch every rule gives the base LR) and count once).",
        "`naive` falls more than 1 point below the batch-32 accuracy already at global batch 64; "
        f"falls to {100 * acc['naive'][256]:.1f} % at batch 256.",
        "`linear` stays within 1 point of the batch-32 accuracy up to global batch 64; diverges "
        "at global batch 128 (2 of 2 runs), 256 (2 of 2 runs).",
        "`linear_warmup` stays within 1 point of the batch-32 accuracy up to global batch 128; "
        f"falls to {100 * acc['linear_warmup'][256]:.1f} % at batch 256.",
    ]


# The convergence tree's fixed budget (3 epochs) is 1.5x the perfect-scaling steps at every
# batch: no batch could take 2x, so the knee is not measured, and no ratio is given.
NO_KNEE = (
    "The LR oracle's steps to target stay within 2× perfect scaling up to batch 256, but from "
    "batch 64 on the budget allows at most 1.5× the perfect-scaling steps, so no batch could "
    "leave 2×: this budget cannot measure the knee"
)


NO_VALIDATION = (
    "These runs have no validation split: steps to target are counted on the test split, so "
    "the same split chooses the oracle's LR and measures it (a validation split, e.g. "
    "`workload.validation_samples`, keeps the two apart)."
)
POOLED_TAIL = (
    "; pooled from step 0, every window weighs by its |G|², the largest early in training, so "
    "this value leans to the start of training: it is secondary to the value near the target."
)


def expected_fit(steps: dict[int, float]) -> tuple[float, float]:
    """(S_min, E_min): S = S_min + E_min / B by least squares in relative error, computed here
    with numpy's weighted polynomial fit (residuals weighted by 1 / S)."""
    batches = np.array(sorted(steps), dtype=float)
    values = np.array([steps[b] for b in sorted(steps)], dtype=float)
    e_min, s_min = np.polyfit(1 / batches, values, 1, w=1 / values)
    return float(s_min), float(e_min)


def fit_sentence(steps: dict[int, float], seeds_agree: bool) -> str:
    """The fit finding; where every seed of every setting took the same steps, the bootstrap
    interval is the point itself."""
    s_min, e_min = expected_fit(steps)
    b_crit = e_min / s_min

    def ci(x: float) -> str:
        return f"95 % interval {approx(x)}–{approx(x)}"

    assert seeds_agree
    return (
        "Critical batch fitted as McCandlish et al. (2018) define it: S(B) = S_min + E_min / B "
        f"fitted to the LR oracle's seed-median steps at batches "
        f"{', '.join(str(b) for b in sorted(steps))} (least squares in relative error): "
        f"S_min = {s_min:,.0f} steps ({ci(s_min)}), E_min = {e_min:,.0f} samples ({ci(e_min)}), "
        f"B_crit = E_min / S_min ≈ {approx(b_crit)} ({ci(b_crit)}); the intervals resample the "
        "seeds of every LR at every batch and take the oracle again (1000 resamples)."
    )


def expected_target_findings(noise_scale: bool = True) -> list[str]:
    """The steps-to-target findings of the convergence tree (results written before runs could
    stop at the target: its fixed-budget group is studied for steps to target too)."""
    s = trees.STEPS_TO_TARGET
    # every run at a batch that reached the target took the same steps: the fit is exact there
    fit = fit_sentence(s, seeds_agree=True)
    critical = (
        [fit, NEAR_PREFIX, f"{NO_KNEE}.", capital(expected_prediction()) + POOLED_TAIL]
        + ["8 runs that did not reach the target are left out of the noise-scale prediction."]
        if noise_scale
        else [
            fit,
            "No gradient noise scale near the target: the LR oracle's runs recorded no window "
            "of B_simple before they reached it.",
            f"{NO_KNEE}.",
        ]
    )
    # the LRs: naive keeps 0.1, linear and linear_warmup give 0.1 x B/32: two at each batch
    return [
        NO_VALIDATION,
        "LR oracle (at each global batch the fewest seed-median steps over the 1–2 distinct "
        "peak LRs tried there): 85 % test accuracy in "
        + ", ".join(f"{s[b]:,} steps at {b} (LR {0.1 * b / 32:.3g})" for b in sorted(s))
        + ".",
        "At global batch 32 only 1 peak LR (0.1) was tried, fewer than 3: the oracle there is "
        "not tuned, and every ratio to it is suspect.",
        *[
            f"At global batch {b} only 2 peak LRs (0.1, {0.1 * b / 32:.3g}) were tried, fewer "
            "than 3: the oracle there is not tuned, and every ratio to it is suspect."
            for b in (64, 128, 256)
        ],
        # 24 runs, 4 of them repeating another rule's at batch 32: 20; naive below 85 % from
        # 128 on, linear diverged there
        "8 of 20 runs did not reach 85 % within the 3-epoch budget (or diverged first); each "
        "counts as never reaching it, so a seed median is never where half the seeds or more "
        "missed: `naive` and `linear` at 128; `naive` and `linear` at 256.",
        "`naive` against the LR oracle (oracle steps / its steps to 85 %): 100 % at 64, never "
        "from 128 on.",
        "`linear` against the LR oracle (oracle steps / its steps to 85 %): 100 % at 64, never "
        "from 128 on.",
        "`linear_warmup` against the LR oracle (oracle steps / its steps to 85 %): 100 % at 64, "
        "100 % at 128, 100 % at 256.",
        *critical,
    ]


NEAR_PREFIX = (
    "B_simple near the target (the windows of the last 25 % of the steps before each of the LR "
    "oracle's runs reached 85 %, pooled per run; median over 8 runs)"
)


def matches(found: list[str], expected: list[str]) -> bool:
    """Equal, except that the near-target sentence is checked by its beginning (its value is
    checked by hand in test_tuned_baseline)."""
    return len(found) == len(expected) and all(
        f.startswith(e) if e == NEAR_PREFIX else f == e
        for f, e in zip(found, expected, strict=True)
    )


def capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def expected_convergence_findings(noise_scale: bool = True) -> list[str]:
    return expected_accuracy_findings() + expected_target_findings(noise_scale)


# ---- reports ------------------------------------------------------------------------------------


def test_scaling_only(dpsuite, capsys, scaling_tree, tmp_path):
    out, err = report(dpsuite, capsys, scaling_tree, tmp_path / "rep")
    assert err == ""
    assert assert_valid_images(out) == SCALING_PLOTS | COMM_PLOT
    found = findings_of(out)
    for sentence in expected_scaling_findings():
        assert sentence in found
    assert (
        "box-a, 2 ranks (gloo): peak all-reduce bus bandwidth 3.94 GB/s at 16 MiB messages."
        in found
    )
    assert not any("batch-32 accuracy" in f for f in found)
    summary = pd.read_csv(out / "summary.csv")
    assert len(summary) == len(trees.THROUGHPUT)
    assert list(summary["workers"]) == sorted(trees.THROUGHPUT)  # run ids sort by worker count
    typed = pd.read_parquet(out / "summary.parquet")  # the same rows, beside it
    assert list(typed["run_id"]) == list(summary["run_id"])
    assert typed["samples_per_s"].tolist() == pytest.approx(summary["samples_per_s"].tolist())


def test_convergence_only(dpsuite, capsys, convergence_tree, tmp_path):
    out, _ = report(dpsuite, capsys, convergence_tree, tmp_path / "rep")
    assert assert_valid_images(out) == CONVERGENCE_PLOTS | TARGET_PLOTS | NOISE_SCALE_PLOTS
    assert matches(findings_of(out)[1:], expected_convergence_findings())
    assert findings_of(out)[0].startswith("4 of 24 runs diverged")
    summary = pd.read_csv(out / "summary.csv")
    assert len(summary) == 24 and set(summary["status"]) == {"complete", "diverged"}
    diverged = summary[summary["status"] == "diverged"]
    assert diverged["last_finite_epoch"].eq(1).all()  # the × sits at the last finite eval
    done = summary[summary["status"] == "complete"]
    last = max(trees.GNS_BY_EPOCH)
    expected_final = [trees.gns_at(last, b) for b in done["global_batch"]]
    assert done["grad_noise_scale.final"].tolist() == pytest.approx(expected_final)
    assert done["grad_noise_scale.mean"].notna().all() and "grad_noise_scale" not in summary


def test_runs_that_missed_the_target_are_kept_out_of_the_noise_scale(tmp_path):
    """A linear_warmup run at batch 512 that ended at chance (10 %) has a noise scale of its
    own, that of a model that did not learn: it must not bend the curves or the prediction."""
    root = tmp_path / "res"
    trees.write_convergence(root)
    trees.write_run(
        root,
        workers=512 // trees.PER_WORKER,
        mode="simulated",
        lr_rule="linear_warmup",
        final_acc=0.1,
        noise_scale=True,
        steps_per_epoch=trees.CONVERGENCE_SAMPLES // 512,
    )
    written = build.build_report(root, tmp_path / "rep")
    tree = data.load_tree(root)
    trained = critical_batch_fit.trained_runs(data.convergence_runs(tree.runs), tree.epochs)
    assert 512 not in set(trained.runs["global_batch"])
    assert 512 not in set(
        critical_batch_fit.noise_scale_curves(trained.runs, tree.epochs, "linear_warmup")[
            "global_batch"
        ]
    )
    found = findings_of(written.out)
    assert any(capital(expected_prediction()) in f for f in found)  # the same as without it
    assert "9 runs that did not reach the target are left out of the noise-scale prediction." in (
        found
    )


def strip_noise_scale(root: Path) -> None:
    """Make a tree look written before the noise scale was measured: no columns, no metric."""
    for epochs_csv in root.rglob("epochs.csv"):
        frame = pd.read_csv(epochs_csv).drop(columns=results.OPTIONAL_EPOCH_COLUMNS)
        frame.to_csv(epochs_csv, index=False)
    for run_json in root.rglob("run.json"):
        rec = results.read_json(run_json)
        rec["metrics"].pop("grad_noise_scale")
        results.write_json_atomic(run_json, rec)


@pytest.mark.parametrize("old_files", [False, True], ids=["empty-columns", "older-files"])
def test_convergence_without_noise_scale(tmp_path, old_files):
    root = tmp_path / "res"
    trees.write_convergence(root, noise_scale=False)
    if old_files:
        strip_noise_scale(root)
        assert "grad_noise_scale" not in pd.read_csv(next(root.rglob("epochs.csv")))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning of any kind from reading or plotting
        written = build.build_report(root, tmp_path / "rep")
    assert written.warnings == [  # only that the oracle's batches are not known to be tuned
        f"steps to target (mnist1d_mlp): global batch {b} is not known to be tuned: "
        f"only {n} LR{'s' if n > 1 else ''} tried"
        for b, n in ((32, 1), (64, 2), (128, 2), (256, 2))
    ]
    out = tmp_path / "rep"
    # the fitted critical batch is drawn without a noise scale to compare it with
    assert assert_valid_images(out) == CONVERGENCE_PLOTS | TARGET_PLOTS | {"critical_batch.png"}
    assert findings_of(out)[1:] == expected_convergence_findings(noise_scale=False)
    summary = pd.read_csv(out / "summary.csv")
    assert summary["grad_noise_scale.mean"].isna().all()


def test_mixed_with_failures_and_corrupt_files(dpsuite, capsys, mixed_tree, tmp_path):
    root, damaged = mixed_tree
    out, err = report(dpsuite, capsys, root, tmp_path / "rep")
    assert assert_valid_images(out) == (
        SCALING_PLOTS | CONVERGENCE_PLOTS | TARGET_PLOTS | NOISE_SCALE_PLOTS | COMM_PLOT | TIME_PLOT
    )
    found = findings_of(out)
    assert found[:2] == [
        "4 of 32 runs diverged (non-finite loss); they are drawn with an × at their last "
        "finite evaluation.",
        "2 of 32 runs failed; they are listed under Failed runs.",
    ]
    for sentence in expected_scaling_findings() + expected_convergence_findings():
        assert sentence in found or (
            sentence == NEAR_PREFIX and any(f.startswith(sentence) for f in found)
        )
    # Each damaged file is named once in a warning; the report goes on without it.
    warnings = [line for line in err.splitlines() if line.startswith("dpsuite: warning: ")]
    for key in ("truncated", "epochs", "steps"):
        assert sum(str(damaged[key]) in w for w in warnings) == 1, (key, warnings)
    html = (out / "index.html").read_text()
    assert "<h2>Warnings</h2>" in html and str(damaged["truncated"]) in html
    failed_section = html.split("<h2>Failed runs</h2>", 1)[1].split("<h2>", 1)[0]
    assert damaged["failed"].name in failed_section and "worker 3 exited" in failed_section
    assert damaged["stale"].name in failed_section  # 'running' from a dead process
    summary = pd.read_csv(out / "summary.csv")
    assert len(summary) == 32 and summary["run_id"].is_unique
    # a record lacking the keys its run id is made of is left out, named in a warning
    assert "minimal" not in set(summary["run_id"])
    assert any("minimal/run.json: schema_version is missing" in w for w in warnings)


def test_without_timing_breakdown_the_plot_is_left_out(dpsuite, capsys, tmp_path):
    trees.write_scaling(tmp_path / "res", timing=False)
    out, _ = report(dpsuite, capsys, tmp_path / "res", tmp_path / "rep")
    assert assert_valid_images(out) == {"throughput.png", "efficiency.png"}
    assert not any("exposed communication" in f for f in findings_of(out))


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


def test_simulated_scaling_runs_are_not_a_scaling_series():
    frame = pd.DataFrame(
        {
            "machine": "m",
            "workload": "w",
            "per_worker_batch": 32,
            "precision": "fp32",
            "device": "cpu",
            "workers": [1, 2, 1, 2],
            "mode": ["simulated", "simulated", "ddp", "ddp"],
            "status": ["complete", "complete", "complete", "failed"],
            "samples_per_s": [100.0, 150.0, 100.0, None],
            "step_time_s": 0.1,
            "compute_time_s": None,
            "comm_time_s": None,
            "exposed_comm_s": None,
        }
    )
    assert data.scaling_table(frame).empty


def test_plain_scaling_sweep_is_not_a_convergence_study(scaling_tree):
    tree = data.load_tree(scaling_tree)
    assert tree.runs["global_batch"].nunique() == 4
    assert data.convergence_runs(tree.runs).empty


@pytest.mark.parametrize(
    "batches,expected",
    [([32], [32]), ([32, 64, 128], [32, 64, 128]), ([32, 64, 128, 256, 512], [32, 128, 512])],
)
def test_curve_batches(batches, expected):
    assert data.curve_batches(pd.DataFrame({"global_batch": batches})) == expected


# ---- headline and topics -----------------------------------------------------------------------


def expected_headline_start() -> str:
    """The accuracy sentence, hand-derived from trees.ACCURACY."""
    return (
        "Largest global batch within 1 point of the batch-32 accuracy (91.0 %): 128 with "
        "`linear_warmup`; 64 with `linear`; only 32 with `naive`."
    )


def expected_warmup_headline() -> str:
    acc = trees.ACCURACY
    return (
        "Warmup extends linear scaling from batch 64 to 128: at global batch 128 "
        f"`linear_warmup` keeps {100 * acc['linear_warmup'][128]:.1f} % where `linear` "
        f"diverges, but at 256 warmup falls to {100 * acc['linear_warmup'][256]:.1f} % too."
    )


# The convergence tree's budget cannot show the knee; its noise scale predicts about 130.
def knee_headline() -> str:
    """The beginning of the critical-batch headline of the convergence tree (the noise scale
    near the target that follows is checked by hand in test_tuned_baseline)."""
    s_min, e_min = expected_fit(trees.STEPS_TO_TARGET)
    b = approx(e_min / s_min)
    return (
        f"Critical batch fitted to the best LR's steps to 85 %: B_crit = E_min / S_min ≈ {b} "
        f"(95 % interval {b}–{b}); the gradient noise scale near the target predicts ≈ "
    )


def with_knee_headline(found: list[str], expected: list[str]) -> bool:
    return len(found) == len(expected) and all(
        f.startswith(e) if e == knee_headline() else f == e
        for f, e in zip(found, expected, strict=True)
    )


def expected_time_headline() -> str:
    """Steps to 85 % at global batch 32·N x the measured step time 32·N / THROUGHPUT[N]."""
    times = {
        n: trees.STEPS_TO_TARGET[32 * n] * 32 * n / tput for n, tput in trees.THROUGHPUT.items()
    }
    n = min(times, key=times.get)
    assert n == 8
    return (
        f"On this machine 85 % is reached fastest with {n} workers × 32 ({times[n]:.2g} s of "
        "training steps at the best LR)."
    )


def expected_scaling_headline(n: int = 8, crowded: str = "") -> str:
    t = trees.THROUGHPUT
    exposed_ms = 1e3 * (n * trees.PER_WORKER / t[n] - trees.COMPUTE_S)
    exposed = f"{exposed_ms:.0f}" if exposed_ms >= 10 else f"{exposed_ms:.2g}"  # two digits
    return (
        f"At {n} workers mnist1d_mlp · 32/worker reaches {100 * t[n] / (n * t[1]):.0f} % "
        f"scaling efficiency ({1e3 * trees.COMPUTE_S:.0f} ms of compute and {exposed} ms of "
        f"exposed all-reduce per step){crowded}."
    )


def test_headline_says_what_to_act_on_in_five_sentences(mixed_tree, tmp_path):
    root, _ = mixed_tree
    written = build.build_report(root, tmp_path / "rep")
    assert with_knee_headline(
        written.headline,
        [
            expected_headline_start(),
            expected_warmup_headline(),
            expected_scaling_headline(),
            knee_headline(),
            "2 of 32 runs failed; they are listed under Failed runs.",
        ],
    )
    assert headline_of(tmp_path / "rep") == written.headline
    page = (tmp_path / "rep" / "index.html").read_text()
    top = page.split('<ul class="headline">', 1)[1].split("</ul>", 1)[0]
    assert top.count("<li>") == 5 and page.index("headline") < page.index("<h2>Findings")


def test_other_collectives_are_plotted_and_found_but_leave_the_all_reduce_headline(tmp_path):
    root = tmp_path / "res"
    trees.write_scaling(root)
    trees.write_comm_bench(root)
    trees.write_comm_bench(root, peak=9.0, collective="all_gather")
    trees.write_comm_bench(root, peak=2.0, collective="broadcast")
    written = build.build_report(root, tmp_path / "rep")
    assert (
        "All-reduce bus bandwidth (2 ranks, gloo) peaks at 3.94 GB/s with 16 MiB messages."
        in written.headline
    )
    text = (tmp_path / "rep" / "index.md").read_text()
    assert "peak all-reduce bus bandwidth 3.94 GB/s" in text
    assert "peak all-gather bus bandwidth 8.86 GB/s" in text
    assert "peak broadcast bus bandwidth 1.97 GB/s" in text
    assert "Collective bandwidth vs message size" in text
    comm = data.load_tree(root).comm
    fig = comm_section.allreduce_bandwidth(comm)
    labels = [line.get_label() for line in fig.axes[0].get_lines()]
    assert labels == [
        f"{name} · box-a · 2 ranks · gloo" for name in ("all_reduce", "all_gather", "broadcast")
    ]
    assert len({line.get_color() for line in fig.axes[0].get_lines()}) == 3


def test_a_one_rank_benchmark_checks_the_path_but_shows_no_bandwidth(tmp_path):
    """One GPU's comm-bench (busbw is 0 by definition) is named as a check, not as a peak of
    0 GB/s, and neither draws a line nor becomes the bandwidth headline."""
    root = tmp_path / "res"
    trees.write_scaling(root)
    trees.write_comm_bench(root)
    trees.write_comm_bench(root, tag="gpu-1", peak=400.0, world=1)
    written = build.build_report(root, tmp_path / "rep")
    assert "All-reduce bus bandwidth (2 ranks, gloo) peaks at 3.94 GB/s" in " ".join(
        written.headline
    )
    found = findings_of(tmp_path / "rep")
    one = [f for f in found if f.startswith("gpu-1")]
    assert one == [
        "gpu-1, 1 rank (gloo): the all-reduce ran and was checked at 8 message sizes (0 wrong), "
        "fastest 0.7 µs; bus bandwidth needs 2 or more ranks."  # 1 KiB at 1.56 GB/s
    ]
    comm = comm_section.with_traffic(data.load_tree(root).comm)
    fig = comm_section.allreduce_bandwidth(comm)
    assert [line.get_label() for line in fig.axes[0].get_lines()] == ["box-a · 2 ranks · gloo"]
    alone = tmp_path / "alone"
    trees.write_scaling(alone)
    trees.write_comm_bench(alone, tag="gpu-1", peak=400.0, world=1)
    written = build.build_report(alone, tmp_path / "rep-alone")
    assert "bus bandwidth" not in " ".join(written.headline).replace("needs", "")
    assert not (tmp_path / "rep-alone" / "allreduce_bandwidth.png").exists()


def test_without_failures_or_scaling_runs_the_headline_tells_more_of_convergence(
    convergence_tree, tmp_path
):
    written = build.build_report(convergence_tree, tmp_path / "rep")
    assert with_knee_headline(
        written.headline,
        [
            expected_headline_start(),
            expected_warmup_headline(),
            knee_headline(),
            "At global batch 256, against the best of the LRs tried (70 steps to 85 %), the "
            "rules' efficiency is `linear_warmup` 100 %; `naive` and `linear` never reach it.",
        ],
    )


def test_findings_are_grouped_by_topic(mixed_tree, tmp_path):
    root, _ = mixed_tree
    out = build.build_report(root, tmp_path / "rep").out
    topics = topics_of(out)
    assert list(topics) == ["Runs", "Scaling", "All-reduce", "Convergence", "Steps to target"]
    assert set(expected_scaling_findings()) <= set(topics["Scaling"])
    assert topics["Convergence"] == expected_accuracy_findings()
    assert matches(
        topics["Steps to target"][: len(expected_target_findings())], expected_target_findings()
    )
    page = (out / "index.html").read_text()
    summaries = [p.split("</summary>", 1)[0] for p in page.split("<details><summary>")[1:]]
    assert summaries == [f"{t} ({len(found)})" for t, found in topics.items()]


# ---- oversubscription ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def crowded_tree(tmp_path_factory) -> Path:
    """A scaling sweep on a 4-core machine: the 8-worker point is oversubscribed."""
    root = tmp_path_factory.mktemp("crowded")
    trees.write_scaling(root, cores=4)
    return root


def test_oversubscribed_points_are_marked(crowded_tree, tmp_path):

    scaling = data.scaling_table(data.load_tree(crowded_tree).runs)
    assert list(scaling["oversubscribed"]) == [False, False, False, True]
    figure = scaling_section.throughput_vs_workers(scaling)
    hollow = [
        list(line.get_xdata())
        for line in figure.axes[0].lines
        if line.get_markerfacecolor() == "white" and len(line.get_xdata())
    ]
    assert hollow == [[8]], "the oversubscribed point, and only it, is drawn hollow"
    bars = scaling_section.step_time_breakdown(scaling).axes[0].patches
    assert sum(bar.get_hatch() == "//" for bar in bars) == 3  # compute, exposed, rest at N=8

    written = build.build_report(crowded_tree, tmp_path / "rep")
    assert (
        expected_scaling_headline(
            4,
            "; runs at 8 workers had more worker threads than cores (oversubscribed, drawn "
            "hollow) and measure contention",
        )
        in written.headline
    )
    md = (written.out / "index.md").read_text()
    table = md.split("\n## Scaling\n\n", 1)[1].split("\n\n", 2)[1].splitlines()
    header = [c.strip() for c in table[0].strip("|").split("|")]
    marks = [[c.strip() for c in row.strip("|").split("|")][-1] for row in table[2:]]
    assert header[-1] == "oversubscribed" and marks == ["", "", "", "yes"]


# ---- bad input ----------------------------------------------------------------------------------


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


# ---- compare ------------------------------------------------------------------------------------


def test_compare_two_tagged_trees(dpsuite, capsys, tmp_path):
    a, b = tmp_path / "box-a", tmp_path / "box-b"
    trees.write_scaling(a, tag="box-a", host="host-a")
    trees.write_comm_bench(a, tag="box-a", peak=4.0)
    trees.write_scaling(b, tag="box-b", host="host-b", speed=0.5)
    trees.write_comm_bench(b, tag="box-b", peak=1.0)
    out = tmp_path / "cmp"
    assert dpsuite("compare", str(a), str(b), "--out", str(out)) == 0
    printed = capsys.readouterr().out
    assert assert_valid_images(out) == {
        "throughput.png",
        "efficiency.png",
        "allreduce_bandwidth.png",
    }
    assert headline_of(out) == [
        "Over 4 configurations run on both, `box-b` has 0.50× the throughput of `box-a` "
        "(median; from 0.50× to 0.50×)."
    ]
    found = findings_of(out)
    for machine in ("box-a", "box-b"):  # efficiency is the same shape on both
        label = f"{machine} · mnist1d_mlp · 32/worker"
        assert f"{label}: largest worker count with ≥ 80 % scaling efficiency: 4 (85 %)." in found
    ratios = pd.read_csv(out / "ratios.csv")
    assert sorted(ratios["workers"]) == sorted(trees.THROUGHPUT)
    assert ratios["ratio_B_over_A"].round(6).eq(0.5).all()
    assert ratios["ratio_low"].isna().all(), "one run per point: no interval"
    assert set(pd.read_csv(out / "summary.csv")["machine"]) == {"box-a", "box-b"}
    assert set(pd.read_parquet(out / "summary.parquet")["machine"]) == {"box-a", "box-b"}
    # The ratio table comes first, in the terminal and in the report.
    assert printed.startswith("throughput B / A per configuration (A: box-a, B: box-b):")
    assert "mnist1d_mlp, 8 workers, 32/worker" in printed and "0.50×" in printed
    md = (out / "index.md").read_text()
    assert md.index("## Throughput B ÷ A per configuration") < md.index("## Findings")


def test_compare_untagged_groups_by_fingerprint(dpsuite, capsys, tmp_path):
    a, b = tmp_path / "one", tmp_path / "two"
    trees.write_scaling(a, tag=None, host="alpha")
    trees.write_scaling(b, tag=None, host="beta", speed=0.8)
    out = tmp_path / "cmp"
    assert dpsuite("compare", str(a), str(b), "--out", str(out)) == 0
    assert headline_of(out)[0].startswith(
        "Over 4 configurations run on both, `beta (id-beta)` has 0.80× the throughput of "
        "`alpha (id-alpha)`"
    )


def test_compare_one_machine_says_so(dpsuite, capsys, scaling_tree, tmp_path):
    out = tmp_path / "cmp"
    assert dpsuite("compare", str(scaling_tree), str(scaling_tree), "--out", str(out)) == 0
    assert headline_of(out)[0].startswith("All results come from one machine (`box-a`)")
    assert not (out / "ratios.csv").exists()


REPEATED_A = {1: [1000.0, 1040.0, 960.0], 2: [1900.0, 1950.0, 1850.0]}
# B: as fast at 1 worker, 20 % slower at 2 workers, in every repeat.
REPEATED_B = {1: [1010.0, 990.0, 1030.0], 2: [1500.0, 1560.0, 1540.0]}


@pytest.fixture(scope="module")
def repeated_machines(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("repeated")
    trees.write_repeated(root / "a", "box-a", REPEATED_A)
    trees.write_repeated(root / "b", "box-b", REPEATED_B)
    return root / "a", root / "b"


def test_repeats_give_each_scaling_point_a_median_and_an_interval(repeated_machines):
    from dpsuite.analysis.report import stats

    scaling = data.scaling_table(data.load_tree(repeated_machines[0]).runs)
    assert list(scaling["runs"]) == [3, 3]
    assert list(scaling["samples_per_s"]) == [1000.0, 1900.0]  # medians of the repeats
    two = scaling[scaling["workers"] == 2].iloc[0]
    assert (two["samples_per_s_low"], two["samples_per_s_high"]) == stats.median_ci(REPEATED_A[2])
    assert 1850.0 <= two["samples_per_s_low"] < 1900.0 < two["samples_per_s_high"] <= 1950.0
    assert two["efficiency"] == pytest.approx(1900.0 / 2000.0)


def test_compare_gates_a_regression(dpsuite, capsys, repeated_machines, tmp_path):
    a, b = repeated_machines
    assert dpsuite("compare", str(a), str(b), "--out", str(tmp_path / "ok")) == 0
    capsys.readouterr()
    assert (
        dpsuite("compare", str(a), str(b), "--out", str(tmp_path / "cmp"), "--fail-below", "0.95")
        == 1
    )
    captured = capsys.readouterr()
    regressions = [
        line for line in captured.err.splitlines() if line.startswith("dpsuite: regression: ")
    ]
    assert len(regressions) == 1, captured.err
    assert regressions[0].startswith(
        "dpsuite: regression: mnist1d_mlp, 2 workers, 32/worker: box-b / box-a = 0.81× ("
    )
    ratios = pd.read_csv(tmp_path / "cmp" / "ratios.csv").set_index("workers")
    assert ratios.loc[2, "ratio_B_over_A"] == pytest.approx(1540.0 / 1900.0)
    assert ratios.loc[2, "ratio_high"] < 0.95  # the whole interval is below the gate
    assert ratios.loc[1, "ratio_low"] < 1.0 < ratios.loc[1, "ratio_high"]
    assert (
        "1 configuration regressed below 0.95× the throughput on `box-a`"
        in (headline_of(tmp_path / "cmp")[1])
    )
    # The same machines the other way round: B is faster everywhere, nothing regressed.
    assert (
        dpsuite("compare", str(b), str(a), "--out", str(tmp_path / "rev"), "--fail-below", "0.95")
        == 0
    )
    assert "dpsuite: regression" not in capsys.readouterr().err
    assert (
        headline_of(tmp_path / "rev")[1]
        == "No configuration is below 0.95× its throughput on `box-b`."
    )


def test_a_ratio_whose_interval_covers_the_gate_is_not_a_regression(
    dpsuite, capsys, repeated_machines, tmp_path
):
    """At 1 worker B ÷ A is 1.01×, below a gate at 1.02, but its interval reaches above it:
    the repeats do not show a regression. At 2 workers (0.81×) they do."""
    a, b = repeated_machines
    out = tmp_path / "cmp"
    assert dpsuite("compare", str(a), str(b), "--out", str(out), "--fail-below", "1.02") == 1
    err = capsys.readouterr().err
    assert "2 workers" in err and "1 worker," not in err
    one = pd.read_csv(out / "ratios.csv").set_index("workers").loc[1]
    assert one["ratio_B_over_A"] < 1.02 < one["ratio_high"]


@pytest.mark.parametrize("value", ["0", "-1", "abc"])
def test_fail_below_bad_value_is_one_line(dpsuite, capsys, repeated_machines, tmp_path, value):
    a, b = repeated_machines
    out = tmp_path / "cmp"
    assert dpsuite("compare", str(a), str(b), "--out", str(out), "--fail-below", value) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("dpsuite: error: ") and "fail-below" in err
    assert not out.exists()


def test_fail_below_with_nothing_to_compare_is_an_error(dpsuite, capsys, scaling_tree, tmp_path):
    out = tmp_path / "cmp"
    assert dpsuite("compare", str(scaling_tree), "--out", str(out), "--fail-below", "0.9") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "dpsuite: error: --fail-below: no configuration was run with real workers on two "
        "machines, so nothing can be compared"
    ]


def test_efficiency_is_relative_to_the_smallest_worker_count(tmp_path):
    for workers, tput in ((2, 1000.0), (4, 1800.0)):
        trees.write_run(tmp_path, workers=workers, samples_per_s=tput)
    table = data.scaling_table(data.load_tree(tmp_path).runs)
    assert list(table["base_workers"]) == [2, 2]
    assert list(table["efficiency"].round(6)) == [1.0, 0.9]


def test_scaling_model_section_when_runs_carry_parameter_counts(dpsuite, capsys, tmp_path):
    root = tmp_path / "res"
    trees.write_scaling(root)
    trees.write_comm_bench(root)
    for run_json in root.rglob("run.json"):
        rec = results.read_json(run_json)
        results.write_json_atomic(run_json, {**rec, "num_params": 78_858})
    out, _ = report(dpsuite, capsys, root, tmp_path / "rep")
    assert "scaling_model.png" in assert_valid_images(out)
    found = findings_of(out)
    assert any(f.startswith("At 2 workers the scaling model's step time is within") for f in found)
    assert "Scaling model validation" in (out / "index.md").read_text()


# ---- synchronization strategies ----------------------------------------------------------------


def expected_sync_findings() -> list[str]:
    """Hand-computed from trees.SYNC at 4 workers (all-reduce: 308 KiB, 3,000 samples/s, 89 %)."""
    return [
        "At 4 workers, `param_server` sends 616 KiB per step per worker, 2.0× "
        "more than all-reduce's 308 KiB; 1,600 samples/s (0.53× all-reduce); final accuracy "
        "89.0 % (+0.0 points).",
        "At 4 workers, `local_sgd (period 4)` sends 77 KiB per step per worker, "
        "4.0× less than all-reduce's 308 KiB; 3,600 samples/s (1.20× all-reduce); final accuracy "
        "87.0 % (-2.0 points).",
        "At 4 workers, `fp16` sends 154 KiB per step per worker, 2.0× less than "
        "all-reduce's 308 KiB; 3,200 samples/s (1.07× all-reduce); final accuracy 89.0 % "
        "(+0.0 points).",
        "At 4 workers, `powersgd (rank 1, from step 10)` sends 6.23 KiB per step per worker, "
        "49.4× less than all-reduce's 308 KiB; 2,900 samples/s (0.97× "
        "all-reduce); final accuracy 85.0 % (-4.0 points).",
        "At 4 workers, the fastest strategy is `local_sgd (period 4)`: 3,600 samples/s, 1.20× "
        "all-reduce.",
        "`param_server`: the server sends 616 KiB per step at 2 workers and 1.8 MiB at 4 "
        "(3.0×), while a worker sends 616 KiB at 2 and 616 KiB at 4.",
        "At 4 workers, the accuracy–communication frontier (each strategy on it is more than 1 "
        "point more accurate than every cheaper one) is `powersgd (rank 1, from step 10)` "
        "(6.23 KiB, 85.0 %), `local_sgd (period 4)` (77 KiB, 87.0 %), `fp16` (154 KiB, 89.0 %); "
        "dominated: `allreduce`, `param_server`.",
    ]


def test_sync_strategies(dpsuite, capsys, tmp_path):
    trees.write_sync(tmp_path / "res")
    out, err = report(dpsuite, capsys, tmp_path / "res", tmp_path / "rep")
    assert err == ""
    assert assert_valid_images(out) == SCALING_PLOTS | SYNC_PLOTS
    found = findings_of(out)
    sync_found = [f for f in found if f in expected_sync_findings()]
    assert sync_found == expected_sync_findings()
    md = (out / "index.md").read_text()
    table = md.split("\n## Synchronization strategies\n\n", 1)[1].split("\n\n", 2)[1]
    rows = [line for line in table.splitlines()[2:]]
    assert len(rows) == 15  # five strategies x three worker counts
    # Throughput series are split by strategy, never pooled across strategies.
    scaling = data.scaling_table(data.load_tree(tmp_path / "res").runs)
    assert scaling["series"].nunique() == 5
    assert scaling.groupby("series")["workers"].apply(list).map(len).eq(3).all()


def test_no_sync_section_without_strategy_runs(dpsuite, capsys, scaling_tree, tmp_path):
    tree = data.load_tree(scaling_tree)
    assert set(tree.runs["sync"]) == {"allreduce"}  # records without the key read as all-reduce
    out, _ = report(dpsuite, capsys, scaling_tree, tmp_path / "rep")
    assert not SYNC_PLOTS & set(html_images(out))
    assert "## Synchronization strategies" not in (out / "index.md").read_text()


def test_frontier_keeps_only_points_worth_their_bytes():
    from dpsuite.analysis.report.sections.sync import frontier

    points = pd.DataFrame(
        {
            "sync_label": ["a", "b", "c", "d", "e", "f"],
            "wire_bytes_per_step": [10.0, 20.0, 20.0, 40.0, 5.0, 80.0],
            "final_eval_acc": [0.80, 0.85, 0.83, 0.85, 0.70, 0.855],
        }
    )
    assert list(frontier(points, tolerance=0.0)["sync_label"]) == ["e", "a", "b", "f"]
    # Half a point more for twice the bytes is within one seed's noise: not worth it.
    assert list(frontier(points, tolerance=0.01)["sync_label"]) == ["e", "a", "b"]


def test_model_findings_state_the_validated_range_and_name_the_worst_per_worker_count():
    # Validation rows of several fits, concatenated: the index repeats.
    validation = pd.DataFrame(
        {
            "series": ["mlp, b=32", "mlp, b=32", "cnn, b=32", "cnn, b=32"],
            "workers": [2, 4, 2, 4],
            "error_pct": [-14.0, -71.5, -51.5, -70.0],
            "oversubscribed": [False, True, False, True],
        },
        index=[0, 1, 0, 1],
    )
    assert model.model_findings(validation) == [
        "The scaling model is validated against measurements up to 2 workers (runs with more "
        "worker threads than cores left out); its predictions beyond are extrapolation.",
        "At 2 workers the scaling model's step time is within 52 % of the measured one "
        "(worst: cnn, b=32, -52 %).",
        "At 4 workers the scaling model's step time is within 72 % of the measured one "
        "(worst: mlp, b=32, -72 %); these runs had more worker threads than cores, which the "
        "model, fitted to one worker's compute, does not know about.",
    ]


def test_lars_with_its_own_base_lr_and_schedule_joins_the_other_rules(tmp_path):
    root = tmp_path / "res"
    trees.write_convergence(root)
    for batch, acc in ((32, 0.70), (64, 0.69), (128, 0.68), (256, 0.66)):
        run = trees.write_run(
            root, workers=batch // trees.PER_WORKER, mode="simulated", lr_rule="lars", final_acc=acc
        )
        rec = results.read_json(run / "run.json")
        results.write_json_atomic(run / "run.json", {**rec, "base_lr": 3.0, "schedule": "poly"})
    conv = data.convergence_runs(data.load_tree(root).runs)
    assert conv["group"].nunique() == 1 and set(conv["lr_rule"]) >= {"lars", "naive"}
    base = data.baseline(conv)
    # the recipe's own runs at batch 32, not lars: every rule trains the same two seeds there
    assert (base.runs, base.shared) == (len(trees.SEEDS), len(trees.SEEDS) * 2)
    found = convergence.convergence_findings(data.accuracy_table(conv), base)
    assert (
        "`lars` falls more than 1 point below the batch-32 accuracy already at global batch 32; "
        "falls to 66.0 % at batch 256." in found
    )


def test_model_flops_mfu_tokens_and_memory_are_in_the_scaling_table(dpsuite, capsys, tmp_path):
    root = tmp_path / "res"
    trees.write_scaling(root)
    for run_json in root.rglob("run.json"):
        rec = results.read_json(run_json)
        rec["metrics"].update(
            tokens_per_s=64 * rec["metrics"]["samples_per_s"],
            model_tflops_per_device=0.5,
            mfu=0.25,
            peak_rss_mib=420.0,
        )
        results.write_json_atomic(run_json, rec)
    out, _ = report(dpsuite, capsys, root, tmp_path / "rep")
    md = (out / "index.md").read_text()
    header = next(line for line in md.splitlines() if "efficiency_pct" in line)
    for column in ("tokens_per_s", "model_TFLOP/s_per_device", "MFU_pct", "peak_RSS_MiB"):
        assert column in header
    assert "| 25 |" in md or "| 25.0 |" in md  # MFU as a percentage


def test_columns_the_runs_lack_are_not_in_the_scaling_table(
    dpsuite, capsys, scaling_tree, tmp_path
):
    out, _ = report(dpsuite, capsys, scaling_tree, tmp_path / "rep")
    assert "MFU_pct" not in (out / "index.md").read_text()


# ---- a steps-to-target study (runs stop at the target) ------------------------------------------


@pytest.fixture(scope="module")
def study_report(tmp_path_factory) -> output.Written:
    root = tmp_path_factory.mktemp("study")
    trees.write_target_study(root / "study")
    trees.write_scaling(root / "scaling")
    return build.build_report(root, tmp_path_factory.mktemp("study-rep"))


def study_knee() -> float:
    """The oracle (fewest seed-median steps per batch, trees.STUDY_STEPS) is 80 steps at 256 and
    90 at 512 against perfect scaling of 50 and 25 from 400 at 32: 1.6x, then 3.6x."""
    r256, r512 = 80 / 50, 90 / 25
    return 256 * 2 ** ((math.log(2) - math.log(r256)) / (math.log(r512) - math.log(r256)))


def study_prediction() -> float:
    """Median over the runs that reached the target of their pooled B_simple (by seed)."""
    return statistics.median(
        trees.STUDY_POOLED[seed]
        for by_batch in trees.STUDY_STEPS.values()
        for per_seed in by_batch.values()
        for seed, steps in zip(trees.STUDY_SEEDS, per_seed, strict=True)
        if steps is not None
    )


def test_study_counts_missed_seeds_finds_the_oracle_knee_and_the_fastest_way(study_report):
    out = study_report.out
    assert {
        "steps_to_target.png",
        "rule_efficiency.png",
        "critical_batch.png",
        "time_to_target.png",
    } <= assert_valid_images(out)
    knee, predicted = study_knee(), study_prediction()
    assert round(knee) == 310 and predicted == 150
    found = topics_of(out)["Steps to target"]
    assert found[:5] == [
        NO_VALIDATION,
        # linear 0.1 x 2; linear_warmup 0.1 x 4; sqrt 0.1 x sqrt(8); power 0.75: 0.1 x 16^0.75
        "LR oracle (at each global batch the fewest seed-median steps over the 1–5 distinct "
        "peak LRs tried there): 80 % test accuracy in 400 steps at 32 (LR 0.1), 205 steps at 64 "
        "(LR 0.2), 110 steps at 128 (LR 0.4), 80 steps at 256 (LR 0.283), 90 steps at 512 "
        "(LR 0.8).",
        "At global batch 32 only 1 peak LR (0.1) was tried, fewer than 3: the oracle there is "
        "not tuned, and every ratio to it is suspect.",
        "At global batch 64 the fewest steps come from the largest LR tried (peak LR 0.2, "
        "`linear`, of 0.1, 0.119, 0.141, 0.168, 0.2): the best-tuned steps there may be fewer "
        "still.",
        "At global batch 128 the fewest steps come from the largest LR tried (peak LR 0.4, "
        "`linear_warmup`, of 0.1, 0.141, 0.2, 0.283, 0.4): the best-tuned steps there may be "
        "fewer still.",
    ]
    assert (
        # 2 + 3 of naive, 1 + 3 + 3 of linear, 2 of linear_warmup, 2 of power 0.25; linear at
        # 128 still reaches it in two of three seeds
        "16 of 75 runs did not reach 80 % within the 16-epoch budget (or diverged first); each "
        "counts as never reaching it, so a seed median is never where half the seeds or more "
        "missed: `naive` and `linear` at 256; `naive`, `linear` and `linear_warmup` at 512; 1 of "
        "the 8 (LR, batch) points of the `power` grid." in found
    )
    assert (
        "`sqrt` against the LR oracle (oracle steps / its steps to 80 %): 79 % at 64, 69 % at "
        "128, 100 % at 256, 95 % at 512." in found
    )  # 205/260, 110/160, 80/80, 90/95
    assert (
        "`linear` against the LR oracle (oracle steps / its steps to 80 %): 100 % at 64, 73 % at "
        "128, never from 256 on." in found
    )  # at 128 its median is 150: the seed that missed counts
    s_min, e_min = expected_fit({32: 400, 64: 205, 128: 110, 256: 80, 512: 90})
    b_crit = e_min / s_min
    fitted = next(f for f in found if f.startswith("Critical batch fitted"))
    assert f"S_min = {s_min:,.0f} steps (" in fitted and f"E_min = {e_min:,.0f} samples" in fitted
    assert f"B_crit = E_min / S_min ≈ {approx(b_crit)} (" in fitted
    # Near the target, per oracle run: the windows (one per epoch, B_simple = gns_at, |G|^2 =
    # 1/epoch) in the last quarter of its steps. 32: step 400 = epoch 2 -> 100; 64 (100 steps
    # an epoch, 200-210 steps): epoch 2 -> 100 x 2^0.1; 128 (50 an epoch, 108-115): epoch 2 ->
    # 100 x 4^0.1; 256 (25 an epoch, 78-82): epoch 3 -> 200 x 8^0.1; 512 (12 an epoch, 88-92):
    # epochs 6 and 7 -> 200 x 16^0.1. Three seeds each: the median is 100 x 4^0.1.
    near = 100 * 4**0.1
    near_found = next(f for f in found if f.startswith("B_simple near the target"))
    assert f"median over 15 runs): ≈ {approx(near)} (" in near_found
    assert f"Predicted / fitted B_crit = {near / b_crit:.2g} (" in near_found
    critical = next(f for f in found if f.startswith("The LR oracle's steps to target leave"))
    assert critical == (
        "The LR oracle's steps to target leave 2× perfect scaling at global batch ≈ 310 "
        "(interpolated in log-log between 256 and 512); for that definition the noise scale "
        f"near the target predicts B_noise + 2·B0 = {approx(near + 64)} (B0 = 32): predicted / "
        f"found = {(near + 64) / knee:.2g}."
    )
    assert (
        "The gradient noise scale of the 59 runs that reached 80 % (B_simple pooled over each "
        f"run's measured steps, median over runs) predicts a critical batch ≈ {predicted:g}"
        in " ".join(found)
    )
    assert "16 runs that did not reach the target are left out of the noise-scale prediction." in (
        found
    )
    assert (
        "Time to 80 % (training steps only) at the best LR per batch: fastest measured on this "
        "machine with 8 workers × 32 (3.9 s: 80 steps of 49 ms)." in found
    )  # 80 steps at 256 (sqrt) x 256 / 5200 samples/s
    assert study_report.headline[0] == expected_scaling_headline()
    assert study_report.headline[1].startswith(
        f"Critical batch fitted to the best LR's steps to 80 %: B_crit = E_min / S_min ≈ "
        f"{approx(b_crit)} (95 % interval "
    )
    assert (
        study_report.headline[1].endswith(
            f"predicted / fitted = {near / b_crit:.2g}; an estimate: batch 32, 64, 128 not known "
            "to be tuned (too few LRs, or the best at the edge of those tried)."
        )
        and f"near the target predicts ≈ {approx(near)} (" in study_report.headline[1]
    )
    assert study_report.headline[2] == (
        "On this machine 80 % is reached fastest with 8 workers × 32 (3.9 s of training steps "
        "at the best LR)."
    )
    md = (out / "index.md").read_text()
    assert "| 512 | 90 | 25 | " in md and "| power 0.75 |" in md  # the grid's LR is named
    assert "the gradients of the two halves of each global batch" in md


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


def test_the_wait_for_the_slowest_rank_is_drawn_and_said_apart_from_communication(crowded_tree):
    scaling = data.scaling_table(data.load_tree(crowded_tree).runs)
    row = scaling.iloc[1]
    # A step whose exposed time is more than its whole all-reduce, with a measured wait.
    scaling.loc[scaling.index[1], ["comm_time_s", "exposed_comm_s"]] = [0.001, 0.002]
    scaling["straggler_wait_s"] = 0.0005
    labels = [
        bar.get_label() for bar in scaling_section.step_time_breakdown(scaling).axes[0].containers
    ]
    assert "waiting for slowest rank" in labels and "compute (typical rank)" in labels
    sentence = scaling_section.communication_findings("w", scaling.iloc[:2])[0]
    assert f"at {int(row['workers'])} workers" in sentence
    assert "waiting for the slowest rank adds 0.50 ms more" in sentence
    assert (
        "more than the whole 1.00 ms all-reduce, so 1.00 ms of it is not the all-reduce" in sentence
    )
    assert "hidden" not in sentence
