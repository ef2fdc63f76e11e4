"""The scaling model scored against two trivial forecasts: a constant (the mean efficiency of
the counts it is fitted on, the baseline's 1.0 included) and "efficiency stays what it was at
the largest smaller count". Leave-last-out on every published table with two or more smaller
GPU counts: fitted on the smaller counts, the largest predicted; the rows, the target and the
scoring are fixed here, before the numbers were computed."""

from pathlib import Path

import pandas as pd
import yaml

from dpsuite.analysis.scaling import leave_last_out, skill
from dpsuite.analysis.scaling.published import PUBLISHED, published_table

README = Path(__file__).resolve().parents[1] / "README.md"
DOC = Path(__file__).resolve().parents[1] / "docs" / "scaling-model.md"

# Fixed before any leave-last-out number was computed: the model's mean |error| over a family's
# held-out rows is at most this share of the "stays what it was" forecast's.
TARGET_RATIO = 0.75

# Every published table that gives two or more GPU counts below its largest (the baseline
# included): the Transformer-XL tables (1, 2, 4, 8 GPUs; DGX-2H also 16; 1, 2, 4, 8 nodes) and
# the second held-out set (docs/scaling-model.md): SSD, Mask R-CNN, Jasper, WaveGlow and BERT's
# SQuAD fine-tuning (1, 4, 8 GPUs; DGX-2 also 16). The ResNet-50 tables give 1 and 8 GPUs
# only, Horovod and Goyal et al. a single ratio.
SECOND_SET = {
    "DeepLearningExamples, SSD300 v1.1, DGX A100 40GB, TF32 b64",
    "DeepLearningExamples, SSD300 v1.1, DGX A100 40GB, AMP b64",
    "DeepLearningExamples, SSD300 v1.1, DGX A100 40GB, TF32 b128",
    "DeepLearningExamples, SSD300 v1.1, DGX A100 40GB, AMP b128",
    "DeepLearningExamples, SSD300 v1.1, DGX-1 V100 16GB, FP32 b32",
    "DeepLearningExamples, SSD300 v1.1, DGX-1 V100 16GB, AMP b32",
    "DeepLearningExamples, SSD300 v1.1, DGX-1 V100 16GB, AMP b64",
    "DeepLearningExamples, Mask R-CNN, DGX A100 40GB, TF32 b8",
    "DeepLearningExamples, Mask R-CNN, DGX A100 40GB, AMP b8",
    "DeepLearningExamples, Mask R-CNN, DGX-1 V100 16GB, FP32 b4",
    "DeepLearningExamples, Mask R-CNN, DGX-1 V100 16GB, AMP b4",
    "DeepLearningExamples, Mask R-CNN, DGX-2 V100 32GB, FP32 b4",
    "DeepLearningExamples, Mask R-CNN, DGX-2 V100 32GB, AMP b4",
    "DeepLearningExamples, Jasper, DGX A100 80GB, TF32 b32",
    "DeepLearningExamples, Jasper, DGX A100 80GB, AMP b32",
    "DeepLearningExamples, Jasper, DGX A100 80GB, TF32 b64",
    "DeepLearningExamples, Jasper, DGX A100 80GB, AMP b64",
    "DeepLearningExamples, Jasper, DGX-1 V100 16GB, FP32 b16",
    "DeepLearningExamples, Jasper, DGX-1 V100 16GB, AMP b16",
    "DeepLearningExamples, Jasper, DGX-1 V100 32GB, FP32 b32",
    "DeepLearningExamples, Jasper, DGX-1 V100 32GB, AMP b32",
    "DeepLearningExamples, Jasper, DGX-1 V100 32GB, AMP b64",
    "DeepLearningExamples, Jasper, DGX-2, FP32 b32",
    "DeepLearningExamples, Jasper, DGX-2, AMP b32",
    "DeepLearningExamples, Jasper, DGX-2, AMP b64",
    "DeepLearningExamples, WaveGlow, DGX A100 40GB, AMP b10",
    "DeepLearningExamples, WaveGlow, DGX A100 40GB, TF32 b4",
    "DeepLearningExamples, WaveGlow, DGX-1 V100 16GB, AMP b10",
    "DeepLearningExamples, WaveGlow, DGX-1 V100 16GB, FP32 b4",
    "DeepLearningExamples, BERT-large SQuAD fine-tuning, DGX A100 40GB, TF32 b16",
    "DeepLearningExamples, BERT-large SQuAD fine-tuning, DGX A100 40GB, AMP b32",
    "DeepLearningExamples, BERT-large SQuAD fine-tuning, DGX-2 V100 32GB, FP32 b8",
    "DeepLearningExamples, BERT-large SQuAD fine-tuning, DGX-2 V100 32GB, AMP b10",
    "DeepLearningExamples, BERT-large SQuAD fine-tuning, DGX-1 V100 32GB, FP32 b8",
    "DeepLearningExamples, BERT-large SQuAD fine-tuning, DGX-1 V100 32GB, AMP b10",
    "DeepLearningExamples, BERT-large SQuAD fine-tuning, DGX-1 V100 16GB, FP32 b4",
    "DeepLearningExamples, BERT-large SQuAD fine-tuning, DGX-1 V100 16GB, AMP b10",
}
LEAVE_LAST_OUT_ROWS = SECOND_SET | {
    f"DeepLearningExamples, Transformer-XL {x}"
    for x in (
        "base, DGX A100 40GB, TF32 b32",
        "base, DGX A100 40GB, AMP b32",
        "large, DGX A100 40GB, TF32 b8",
        "large, DGX A100 40GB, AMP b8",
        "large, DGX A100 40GB, AMP b16",
        "base, DGX-1 V100 16GB, FP32 b16",
        "base, DGX-1 V100 16GB, AMP b16",
        "base, DGX-1 V100 16GB, AMP b32",
        "large, DGX-1 V100 16GB, FP32 b2",
        "large, DGX-1 V100 16GB, AMP b2",
        "large, DGX-1 V100 16GB, AMP b4",
        "base, DGX-2H, FP32 b16",
        "base, DGX-2H, AMP b16",
        "large, DGX-2H, FP32 b8",
        "large, DGX-2H, AMP b8",
        "large, 8 x DGX-2H, FP32 b4",
        "large, 8 x DGX-2H, AMP b4",
    )
}


def test_the_target_is_the_one_fixed_here():
    assert leave_last_out.TARGET_RATIO == TARGET_RATIO


def test_leave_last_out_takes_every_table_with_two_smaller_counts_and_no_other():
    table = leave_last_out.leave_last_out_table()
    assert set(table["label"]) == LEAVE_LAST_OUT_ROWS
    entries = {e["label"]: e for e in yaml.safe_load(PUBLISHED.read_text())}
    for r in table.itertuples():
        smaller = entries[r.label]["smaller_counts"]
        assert r.fitted_on == max(smaller) < r.workers
        assert r.published == entries[r.label]["published_efficiency"]


def test_the_trivial_forecasts_use_only_the_smaller_counts():
    assert skill.trivial_forecasts({2: 0.9, 4: 0.8}) == {
        "constant": (1.0 + 0.9 + 0.8) / 3,
        "stays": 0.8,
    }
    # Nothing measured below the predicted count but the baseline: both forecast 1.0.
    assert skill.trivial_forecasts({}) == {"constant": 1.0, "stays": 1.0}


def test_the_held_out_point_is_never_an_input(tmp_path):
    entries = yaml.safe_load(PUBLISHED.read_text())
    before = leave_last_out.leave_last_out_table().set_index("label")
    for e in entries:
        e["published_efficiency"] = 0.5
    path = tmp_path / "published.yaml"
    path.write_text(yaml.safe_dump(entries))
    after = leave_last_out.leave_last_out_table(path).set_index("label")
    for column in ("model", "constant", "stays"):
        pd.testing.assert_series_equal(before[column], after[column])
    assert (after["published"] == 0.5).all()


def test_mean_absolute_errors_per_family_by_hand():
    rows = pd.DataFrame(
        {
            "family": ["a", "a", "b"],
            "kind": ["estimate", "bound", "estimate"],
            "published": [0.90, 0.80, 0.70],
            "model": [0.92, 0.77, 0.70],
            "constant": [1.00, 0.90, 0.80],
            "stays": [0.95, 0.85, 0.75],
        }
    )
    scored = skill.skill_by_family(rows).set_index("family")
    assert scored.loc["a", "rows"] == 2 and scored.loc["a", "kind"] == "estimate or bound"
    assert abs(scored.loc["a", "model"] - 2.5) < 1e-9  # (2 + 3) / 2 points
    assert abs(scored.loc["a", "constant"] - 10.0) < 1e-9
    assert abs(scored.loc["a", "stays"] - 5.0) < 1e-9
    assert abs(scored.loc["a", "ratio"] - 0.5) < 1e-9
    assert scored.loc["b", "model"] == 0.0 and scored.loc["b", "ratio"] == 0.0
    assert list(scored.index) == ["a", "b", "all"]
    assert scored.loc["all", "rows"] == 3
    assert abs(scored.loc["all", "model"] - 5.0 / 3) < 1e-9


def test_the_verdict_says_plainly_whether_the_target_is_met():
    scored = skill.skill_by_family(leave_last_out.leave_last_out_table())
    text = leave_last_out.format_leave_last_out(scored)
    for r in scored.itertuples():
        met = r.ratio <= TARGET_RATIO
        assert f"| {r.family} | {r.rows} |" in text
        assert ("meets" if met else "misses") in text.split(f"| {r.family} |")[1].split("\n")[0]


def test_readme_reports_the_skill_the_code_computes():
    text = README.read_text()
    published = skill.skill_by_family(skill.published_skill_rows(published_table()))
    assert skill.format_skill(published) in text
    held_out = skill.skill_by_family(leave_last_out.leave_last_out_table())
    assert leave_last_out.format_leave_last_out(held_out) in text


def test_the_published_printout_scores_and_calls_a_bound_a_bound(dpsuite, capsys):
    assert dpsuite("predict", "--published") == 0
    out = capsys.readouterr().out
    assert "constant" in out and "stays" in out and "leave-last-out" in out
    assert "a bound is at most" in out
    assert "not a prediction" in out


def test_validation_on_ones_own_runs_is_scored_against_both_forecasts():
    validation = pd.DataFrame(
        {
            "workers": [1, 2, 4],
            "per_worker_batch": [8, 8, 8],
            "measured_step_s": [1.0, 1.25, 1.6],
            "predicted_step_s": [1.0, 1.0, 1.25],
            "oversubscribed": [False, False, False],
        }
    )
    rows = skill.validation_skill_rows(validation)
    assert rows["workers"].tolist() == [2, 4]
    assert rows["published"].tolist() == [0.8, 0.625]  # measured: 1 / 1.25, 1 / 1.6
    assert rows["model"].tolist() == [1.0, 0.8]
    assert rows["stays"].tolist() == [1.0, 0.8]
    assert rows["constant"].tolist() == [1.0, 0.9]
    lines = skill.format_validation_skill(validation)
    assert "model 18.8" in lines[0] and "constant 23.8" in lines[0] and "stays 18.8" in lines[0]
