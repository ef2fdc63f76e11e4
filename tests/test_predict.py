"""The scaling model recovers known parameters and predicts what it was fitted on."""

import pandas as pd
import pytest

from suite.analysis.scaling_model import (
    CommModel,
    ComputeModel,
    ScalingModel,
    fit_comm_model,
    fit_compute_model,
    from_profile,
    overlap_fraction,
    validate,
)

ALPHA, BETA = 20e-6, 1 / 1.2e9  # 20 us per hop, 1.2 GB/s


def bench_frame(n: int = 2) -> pd.DataFrame:
    truth = CommModel(ALPHA, BETA)
    sizes = [2**k for k in range(10, 29, 2)]
    return pd.DataFrame(
        {
            "size_bytes": sizes,
            "world_size": n,
            "errors": 0,
            "time_us": [1e6 * truth.allreduce_s(s, n) for s in sizes],
        }
    )


def test_alpha_beta_recovered_from_comm_bench():
    fit = fit_comm_model(bench_frame(4))
    assert fit.alpha_s == pytest.approx(ALPHA, rel=1e-6)
    assert fit.beta_s_per_byte == pytest.approx(BETA, rel=1e-6)


def test_comm_fit_ignores_rows_with_errors():
    frame = bench_frame()
    frame.loc[0, ["time_us", "errors"]] = [1e9, 3]
    assert fit_comm_model(frame).alpha_s == pytest.approx(ALPHA, rel=1e-6)


def test_compute_model_is_linear_in_batch():
    single = pd.DataFrame({"per_worker_batch": [32, 64, 128], "step_time_s": [0.002, 0.003, 0.005]})
    m = fit_compute_model(single)
    assert m.fixed_s == pytest.approx(0.001) and m.per_sample_s == pytest.approx(3.125e-5)


def test_overlap_from_comm_and_exposed_times():
    runs = pd.DataFrame(
        {
            "workers": [1, 2, 4],
            "comm_time_s": [None, 0.004, 0.008],
            "exposed_comm_s": [None, 0.001, 0.004],
        }
    )
    assert overlap_fraction(runs) == pytest.approx((0.75 + 0.5) / 2)


def test_prediction_matches_runs_generated_by_the_model():
    model = ScalingModel(
        CommModel(ALPHA, BETA),
        ComputeModel(0.001, 2e-5),
        overlap=0.3,
        grad_bytes=4 * 11e6,
        bucket_bytes=25 * 2**20,
        measured_workers=(1, 2),
    )
    runs = pd.DataFrame(
        [
            {
                "mode": "ddp",
                "workers": n,
                "per_worker_batch": 32,
                "step_time_s": model.step_s(n, 32),
            }
            for n in (1, 2)
        ]
    )
    table = validate(model, runs)
    assert table["error_pct"].abs().max() < 1e-9
    pred = model.predict([1, 2, 8, 4096], 32).set_index("workers")
    assert pred.loc[1, "efficiency"] == pytest.approx(1.0)
    assert pred.loc[4096, "efficiency"] < pred.loc[8, "efficiency"] < 1
    assert not pred.loc[2, "extrapolated"] and pred.loc[8, "extrapolated"]
    # 2 buckets of 25 MiB for 44 MB of gradients: two latency terms
    expected = 0.001 + 2e-5 * 32 + 0.7 * (2 * 2 * 8 * ALPHA + 2 * 8 / 9 * 44e6 * BETA)
    assert model.step_s(9, 32) == pytest.approx(expected)


def test_hand_profile_bandwidth_bound_at_scale():
    # ResNet-50-sized model on 400 Gb/s links: at 512 ranks the ring term approaches 2*S/bw.
    m = from_profile(
        params=25.6e6, flops_per_sample=None, tflops=989, mfu=0.4, link_gbps=400, latency_us=5
    )
    step = m.step_s(512, 256)
    compute = 6 * 25.6e6 * 256 / (989e12 * 0.4)
    ring = 2 * 511 / 512 * 25.6e6 * 4 * 8 / 400e9 + 2 * 511 * 5e-6 * 4
    assert step == pytest.approx(compute + ring, rel=1e-9)


def test_cli_profile_and_bad_input(dpsuite, tmp_path, capsys):
    out = tmp_path / "pred"
    code = dpsuite(
        "predict",
        "--params",
        "25.6e6",
        "--flops-per-sample",
        "12e9",
        "--tflops",
        "989",
        "--link-gbps",
        "400",
        "--batch",
        "256",
        "--max-workers",
        "512",
        "--out",
        str(out),
    )
    assert code == 0
    pred = pd.read_csv(out / "predictions.csv")
    assert list(pred["workers"]) == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    assert pred["samples_per_s"].is_monotonic_increasing
    assert "efficiency" in capsys.readouterr().out

    assert dpsuite("predict", str(tmp_path / "missing")) == 2
    assert "results directory not found" in capsys.readouterr().err
    assert dpsuite("predict") == 2
    assert "--params, --tflops and --link-gbps" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert dpsuite("predict", str(empty)) == 2
    assert "nothing to fit" in capsys.readouterr().err
