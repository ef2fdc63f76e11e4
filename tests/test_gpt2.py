"""The GPT-2-class LM: named sizes, knobs, random and file tokens, a 2-worker DDP run."""

import numpy as np
import pandas as pd
import pytest
import torch

from dpsuite import workloads
from dpsuite.workloads.base import parameter_count
from dpsuite.workloads.gpt2 import SIZES
from tests.conftest import only_run, read_run, run_subprocess

TINY = ["layers=2", "width=32", "heads=2", "context=16", "vocab_size=128", "num_samples=200"]
TINY_ARGS = [f"workload.{kv}" for kv in TINY]


def tiny(**params):
    base = {k: int(v) for k, v in (kv.split("=") for kv in TINY)}
    return workloads.get_workload("gpt2", **{**base, **params})


def test_named_sizes_have_gpt2_shapes_and_knobs_replace_them():
    cfg = workloads.lookup("gpt2").Config(size="355M", layers=3)
    assert cfg.shape() == (3, 1024, 16) and SIZES["1.5B"] == (48, 1600, 25)
    w = tiny()
    model = w.build_model()
    # tied embeddings: tokens + positions + 2 blocks of 12 w^2 + 13 w + final norm
    w2 = 32 * 32
    assert parameter_count(model) == 128 * 32 + 16 * 32 + 2 * (12 * w2 + 13 * 32) + 2 * 32
    data = w.load_data()
    assert data.train_x.shape == (160, 16) and torch.equal(
        data.train_x[:, 1:], data.train_y[:, :-1]
    )
    assert w.synthetic_data and w.tokens_per_sample == 16 and w.eval_chunk == 8


def test_activation_checkpointing_gives_the_same_gradients():
    data = tiny().load_data()
    grads = []
    for on in (False, True):
        torch.manual_seed(0)
        w = tiny(activation_checkpointing=on)
        model = w.build_model()
        w.loss(model(data.train_x[:4]), data.train_y[:4]).backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b)


def test_token_file_is_read_as_uint16_sequences(tmp_path):
    tokens = (np.arange(17 * 30) % 100).astype(np.uint16)
    path = tmp_path / "train.bin"
    tokens.tofile(path)
    w = tiny(token_path=str(path), num_samples=20)
    data = w.load_data()  # memory-mapped: Datasets of (input, target) windows
    assert not w.synthetic_data and w.num_train() == len(data.train) == 16
    assert not w.holds_data_in_memory() and len(data.eval) == 4
    x, y = data.train[1]
    assert x.dtype == torch.int64 and x.tolist() == tokens[17 : 17 + 16].tolist()
    assert y.tolist() == tokens[18 : 18 + 16].tolist()
    spread = tiny(token_path=str(path), num_samples=10).load_data()  # 10 of 30 windows
    assert spread.train[1][0].tolist() == tokens[3 * 17 : 3 * 17 + 16].tolist()
    assert spread.eval[0][0].tolist() == tokens[24 * 17 : 24 * 17 + 16].tolist()


@pytest.mark.parametrize(
    "args,message",
    [
        (["workload.width=30", "workload.heads=4"], "workload.width=30 is not divisible"),
        (["workload.token_path=/nonexistent.bin"], "token_path /nonexistent.bin is not a readable"),
        (["workload.size=7B"], "workload.size must be one of 124M, 355M, 774M, 1.5B, got '7B'"),
    ],
)
def test_bad_gpt2_config_is_one_line(args, message):
    done = run_subprocess("run", "workload=gpt2", *args, "--dry-run")
    assert done.returncode != 0 and message in done.stderr.strip().splitlines()[-1]


@pytest.mark.multiproc
def test_two_workers_train_a_tiny_gpt2_with_checkpointing(dpsuite, tmp_path):
    args = ["workload=gpt2", *TINY_ARGS, "workload.activation_checkpointing=true", "workers=2"]
    args += ["batch.per_worker=4", "train.max_steps=8", "timing.warmup_steps=2"]
    assert dpsuite("run", *args, f"results_dir={tmp_path}", "timing.calibration_steps=2") == 0
    rec = read_run(only_run(tmp_path))
    m = rec["metrics"]
    assert rec["status"] == "complete" and m["steps"] == 8 and rec["synthetic_data"] is True
    assert m["tokens_per_s"] == pytest.approx(m["samples_per_s"] * 16)
    assert m["flops_per_sample"] > 6 * rec["num_params"] * 16 * 0.5  # ~6 N per token and more
    assert rec["config"]["workload"]["activation_checkpointing"] is True

    out = tmp_path.parent / f"{tmp_path.name}-report"
    assert dpsuite("report", str(tmp_path), "--out", str(out)) == 0
    text = (out / "index.md").read_text()
    assert "Synthetic data: accuracy not meaningful. 1 run(s) (gpt2-2x32)" in text
    summary = pd.read_csv(out / "summary.csv")
    assert summary["final_eval_acc"].isna().all() and summary["samples_per_s"].notna().all()
