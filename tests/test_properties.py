"""Property tests: random config overrides and random damage to results files."""

import ast
import pathlib
import warnings

import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpsuite import results
from dpsuite.conf.compose import check_overrides
from dpsuite.errors import UserError
from tests.test_results import consistent_record

KEYS = [
    "workers",
    "batch.per_worker",
    "batch.global",
    "seed",
    "train.epochs",
    "train.max_steps",
    "train.evals_per_epoch",
    "train.check_every",
    "workload.base_lr",
    "workload.base_batch",
    "workload.num_samples",
    "optimizer.momentum",
    "optimizer.weight_decay",
    "schedule.name",
    "schedule.gamma",
    "precision",
    "device",
    "backend",
    "threads_per_worker",
    "mode",
    "lr_rule.warmup_epochs",
    "workload",
    "lr_rule",
    "timing.warmup_steps",
    "nokey",
]
VALUES = st.one_of(
    st.integers(-5, 5000).map(str),
    st.floats(-10, 10, allow_nan=False).map(lambda f: f"{f:.3g}"),
    st.sampled_from(
        [
            "null",
            "true",
            "abc",
            "''",
            "nan",
            "inf",
            "[1,2]",
            "{a: 1}",
            "${oops}",
            "mnist1d_mlp",
            "cosine",
            "fp64",
            "cuda",
            "gloo",
            "simulated",
            "sqrt",
        ]
    ),
)


@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(KEYS), VALUES), max_size=4))
def test_random_overrides_validate_or_fail_with_one_line(tmp_path, pairs):
    overrides = [f"{k}={v}" for k, v in pairs] + [f"results_dir={tmp_path}"]
    try:
        check_overrides(overrides, multirun=False)
    except UserError as exc:
        message = str(exc)
        assert message and "\n" not in message and "Traceback" not in message


def write_tree(root) -> dict[str, str]:
    """Two trusted runs, "good" and "victim"; their run ids by name."""
    ids = {}
    for seed, (name, status) in enumerate((("good", "complete"), ("victim", "complete"))):
        record = consistent_record(seed)
        ids[name] = record["run_id"]
        w = results.RunWriter(root / ids[name])
        w.start(record)
        for e in range(3):
            w.append_epoch(
                {
                    "epoch": e,
                    "step": 10 * e,
                    "samples_seen": 320 * e,
                    "lr": 0.1,
                    "train_loss": 1.0 / (e + 1),
                    "eval_loss": 1.0,
                    "eval_acc": 0.5,
                    "wall_s": e,
                }
            )
        w.write_steps(
            [
                {"step": s, "step_time_s": 0.01, "compute_s": "", "comm_s": "", "lr": 0.1}
                for s in range(5)
            ]
        )
        w.finish(status, metrics={"samples_per_s": 100.0})
    return ids


DAMAGE = st.sampled_from(["truncate", "garbage", "flip"])


@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.sampled_from(["run.json", "epochs.csv", "steps.csv"]),
    DAMAGE,
    st.integers(0, 10_000),
    st.binary(min_size=1, max_size=40),
)
def test_damaged_files_warn_and_the_rest_loads(tmp_path_factory, name, damage, cut, junk):
    root = tmp_path_factory.mktemp("tree")
    ids = write_tree(root)
    target = root / ids["victim"] / name
    data = target.read_bytes()
    if damage == "truncate":
        data = data[: cut % max(len(data), 1)]
    elif damage == "garbage":
        data = junk
    else:
        pos = cut % len(data)
        data = data[:pos] + junk[:1] + data[pos + 1 :]
    target.write_bytes(data)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        frame = results.load(root)
        epochs = {r: results.load_epochs(root / ids[r]) for r in ("good", "victim")}
        steps = {r: results.load_steps(root / ids[r]) for r in ("good", "victim")}
    messages = [str(w.message) for w in caught]
    assert ids["good"] in set(frame["run_id"])
    assert len(epochs["good"]) == 3 and len(steps["good"]) == 5
    assert not any(ids["good"] in m for m in messages)
    if name == "run.json" and ids["victim"] not in set(frame.get("run_id", [])):
        assert any(f"{ids['victim']}/run.json" in m for m in messages)
    rows_left = data.decode("utf-8", "replace").strip().count("\n")  # 0: header (or less) only
    if name == "epochs.csv" and epochs["victim"].empty and rows_left > 0:
        assert any(f"{ids['victim']}/epochs.csv" in m for m in messages)
    assert isinstance(epochs["victim"], pd.DataFrame)


def banned_calls(tree: ast.AST) -> list[str]:
    """pickle imports, eval/exec calls, torch.load, np.load without allow_pickle=False."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
            found += [n for n in names if n.split(".")[0] in ("pickle", "cloudpickle", "dill")]
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id in ("eval", "exec"):
                found.append(f.id)
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
                call = f"{f.value.id}.{f.attr}"
                if call == "torch.load":
                    found.append(call)
                if call == "np.load" and not any(
                    k.arg == "allow_pickle"
                    and isinstance(k.value, ast.Constant)
                    and k.value.value is False
                    for k in node.keywords
                ):
                    found.append("np.load without allow_pickle=False")
    return found


def test_no_pickle_or_eval_on_inputs():
    """Results and configs are read as JSON/CSV/YAML/NPZ only: no pickle, torch.load or eval."""
    sources = [p for d in ("suite", "workloads") for p in pathlib.Path(d).rglob("*.py")]
    assert sources
    offenders = {str(p): banned_calls(ast.parse(p.read_text())) for p in sources}
    assert {k: v for k, v in offenders.items() if v} == {}
    assert banned_calls(ast.parse("import pickle\neval('1')\nnp.load(f)")) == [
        "pickle",
        "eval",
        "np.load without allow_pickle=False",
    ]
