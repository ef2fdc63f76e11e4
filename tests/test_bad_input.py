"""Every bad input ends with one clear stderr line and a non-zero exit, before any work."""

import pytest
import torch
from torch import nn

from dpsuite.conf import run_spec
from dpsuite.conf.compose import compose_config
from dpsuite.errors import UserError, did_you_mean
from dpsuite.workloads import lookup
from tests.conftest import run_subprocess

CASES = [
    (["workload=resnet9000"], "unknown workload 'resnet9000'"),
    # A model's name where a workload's goes: the workload and key that build it.
    (
        ["workload=resnet18"],
        "unknown workload 'resnet18' (did you mean workload=torchvision workload.arch=resnet18?)",
    ),
    (
        ["workload=gpt2-medium"],
        "unknown workload 'gpt2-medium' (did you mean workload=gpt2 workload.size=355M?)",
    ),
    (["lr_rule=cubic"], "unknown lr_rule 'cubic'"),
    (["workers=0"], "workers must be an integer >= 1"),
    (["workers=-2"], "workers must be an integer >= 1"),
    (["batch.per_worker=0"], "batch.per_worker must be an integer >= 1"),
    (["workers=3", "batch.global=64"], "batch.global=64 is not divisible by workers=3"),
    (["device=cuda"], "device=cuda but no CUDA device is available"),
    (["workload.base_lr=0"], "workload.base_lr must be > 0"),
    (["workload.base_lr=-0.1"], "workload.base_lr must be > 0"),
    (["train.epochs=0"], "train.epochs must be an integer >= 1"),
    (["train.target_evals=0"], "train.target_evals must be an integer >= 1"),
    (["lr_rule=power", "lr_rule.peak_lr=-1"], "lr_rule.peak_lr must be > 0"),
    (["mode=async"], "mode must be one of"),
    (["backend=nccl"], "backend=nccl needs device=cuda"),
    (["schedule.name=exp"], "schedule.name must be one of"),
    (["nosuchkey=1"], "unknown config key 'nosuchkey'"),
    (["workrs=2"], "unknown config key 'workrs' (did you mean workers?)"),
    (["+train.epoch=3"], "unknown config key 'train.epoch' (did you mean train.epochs?)"),
    (["+unknown=1"], "unknown config key 'unknown'"),
    (["workers=abc"], "workers must be an integer, got abc"),
    (["workload.base_lr=inf"], "workload.base_lr must be a finite number, got inf"),
    (["ddp.timeout_s=0"], "ddp.timeout_s must be > 0, got 0.0"),
    (
        ["workload.num_samples=2000", "batch.per_worker=4000"],
        "global batch 4000 is larger than the training set (1600 samples of mnist1d_mlp)",
    ),
    (["workload.num_samples=10"], "workload.num_samples must be an integer >= 100, got 10"),
    (["lr_rule=lars", "lr_rule.trust_coefficient=0"], "lr_rule.trust_coefficient must be > 0"),
    (["lr_rule=lars", "lr_rule.base_lr=-1"], "lr_rule.base_lr must be > 0"),
    (
        ["sync=gossip"],
        "unknown sync 'gossip' (choose from: allreduce, bf16, fp16, fsdp, local_sgd,",
    ),
    (["sync=local_sgd", "sync.period=0"], "sync.period must be an integer >= 1, got 0"),
    (["sync=local_sgd", "sync.warmup_steps=-1"], "sync.warmup_steps must be an integer >= 0"),
    (["sync=powersgd", "sync.rank=0"], "sync.rank must be an integer >= 1, got 0"),
    (["sync=powersgd", "sync.start_iter=1"], "sync.start_iter must be an integer >= 2"),
    (["sync=powersgd", "sync.min_compression_rate=0"], "sync.min_compression_rate must be"),
    (
        ["mode=simulated", "workers=4", "sync=param_server"],
        "sync=param_server needs real workers: mode=simulated supports only sync=allreduce",
    ),
    (["sync.period=2"], "unknown config key 'sync.period'; sync has: name"),
    (["sync=fsdp", "sync.wrap=layers"], "sync.wrap must be one of blocks, children, root"),
    (["sync=zero1", "sync.reshard_after_forward=false"], "unknown config key 'sync.reshard_"),
    (
        ["mode=simulated", "workers=2", "sync=fsdp"],
        "sync=fsdp needs real workers: mode=simulated supports only sync=allreduce",
    ),
    # Strategies with what they cannot work with: refused before any rank starts.
    (
        ["workers=2", "sync=fsdp", "sync.mixed_precision=true"],
        "sync.mixed_precision=true needs device=cuda (FSDP's mixed-precision policy",
    ),
    (
        ["workload=cifar_resnet", "workers=2", "sync=fsdp", "step.channels_last=true"],
        "sync=fsdp cannot shard channels_last parameters",
    ),
    (
        ["workers=2", "sync=fsdp", "timing.comm_hook=true"],
        "timing.comm_hook=true times DDP's all-reduce, which sync=fsdp does not use",
    ),
    (["sync=powersgd", "sync.reshard_after_forward=false"], "unknown config key 'sync.reshard_"),
    (["sync=allreduce", "sync.mixed_precision=true"], "unknown config key 'sync.mixed_precision'"),
    (["precision=fp16"], "precision=fp16 needs device=cuda"),
    (["precision=int8"], "precision must be one of fp32, fp64, bf16, fp16"),
    (["timing.calibration_steps=-1"], "timing.calibration_steps must be an integer >= 0"),
    (["ddp.bucket_cap_mb=0"], "ddp.bucket_cap_mb must be > 0"),
    (["noise_scale.window_steps=0"], "noise_scale.window_steps must be an integer >= 1"),
    (["noise_scale.ema=0.9"], "unknown config key 'noise_scale.ema'; noise_scale has: enabled"),
    (["hardware.peak_tflops=0"], "hardware.peak_tflops must be > 0"),
    (["timing.comm_every=0"], "timing.comm_every must be an integer >= 1, got 0"),
    (["noise_scale.every=0"], "noise_scale.every must be an integer >= 1"),
    (["noise_scale.enabled=maybe"], "noise_scale.enabled must be true or false, got maybe"),
    (["ddp.start_method=bogus"], "ddp.start_method must be one of spawn, forkserver, fork"),
    (["workload=tiny_gpt", "workload.heads=3"], "width=128 is not divisible by workload.heads=3"),
    (["workload=cifar_resnet", "workload.data_root=/nonexistent"], "does not hold CIFAR-10"),
    (["workload=tiny_gpt", "workload.text_path=/nonexistent"], "is not a readable file"),
    # Found by the property test: Hydra's own errors for these were tracebacks.
    (["workload=[1,2]"], "workload=[1,2]: workload takes one name (choose from: cifar_resnet,"),
    (["sync=[1]"], "sync=[1]: sync takes one name"),
    (["lr_rule=[naive,sqrt]"], "to run several, sweep them: dpsuite run -m lr_rule=A,B"),
    (["workload={a: 1}"], "workload takes one name"),
    (["lr_rule=null"], "lr_rule takes one name"),
    (["~workers"], "~workers: dpsuite's config keys cannot be deleted"),
    (["~lr_rule"], "~lr_rule: dpsuite's config keys cannot be deleted"),
    (["workload.num_samples=inf"], "workload.num_samples must be an integer, got inf"),
]


@pytest.mark.parametrize("overrides,message", CASES, ids=lambda v: str(v))
def test_bad_input_one_line(dpsuite, tmp_path, capsys, overrides, message):
    out = tmp_path / "res"
    assert dpsuite("run", *overrides, f"results_dir={out}") == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0, err
    assert err.startswith("dpsuite: error: ") and message in err
    assert not out.exists() or not any(out.iterdir()), "no work may start"


def test_empty_results_dir_is_refused(dpsuite, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert dpsuite("run", "results_dir=") == 2
    assert capsys.readouterr().err.strip() == (
        "dpsuite: error: results_dir is empty: name a directory for the results"
    )
    assert not list(tmp_path.iterdir()), "nothing may be written to the current directory"


def test_unwritable_results_dir(dpsuite, tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert dpsuite("run", f"results_dir={blocker}/sub") == 2
    err = capsys.readouterr().err.strip()
    assert "is not writable" in err and err.count("\n") == 0


def test_bad_point_in_a_sweep_is_caught_before_the_first_run(dpsuite, tmp_path, capsys):
    out = tmp_path / "res"
    assert dpsuite("run", "-m", "workers=1,0", f"results_dir={out}") == 2
    assert "workers must be an integer >= 1" in capsys.readouterr().err
    assert not list(out.rglob("run.json"))


def test_more_workers_than_gpus(monkeypatch):
    monkeypatch.setattr(run_spec, "_cuda_count", lambda: 2)
    cfg = compose_config(["device=cuda", "workers=4"])
    with pytest.raises(UserError, match="workers=4 but only 2 CUDA device"):
        run_spec.resolve(cfg)


def test_unknown_command(dpsuite, capsys):
    assert dpsuite("frobnicate") == 2
    assert "unknown command 'frobnicate'" in capsys.readouterr().err


def test_a_typo_of_a_command_names_the_command(dpsuite, capsys):
    assert dpsuite("predic") == 2
    assert "unknown command 'predic' (did you mean predict?) (choose from: run," in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize(
    ("word", "choices", "extra", "hint"),
    [
        ("workrs", ["workers", "batch"], {}, " (did you mean workers?)"),
        ("frobnicate", ["workers", "batch"], {}, ""),
        ("epoch", ["epochs"], {"prefix": "train."}, " (did you mean train.epochs?)"),
        (
            "step_end",
            ["on_step_end"],
            {"known": {"step_end": "on_eval"}},
            " (did you mean on_eval?)",
        ),
    ],
)
def test_did_you_mean_names_the_closest_choice_or_nothing(word, choices, extra, hint):
    assert did_you_mean(word, choices, **extra) == hint


def test_console_exit_code_and_single_line(tmp_path):
    proc = run_subprocess("run", "workers=0", f"results_dir={tmp_path}")
    assert proc.returncode == 2
    assert proc.stderr.strip() == "dpsuite: error: workers must be an integer >= 1, got 0"
    assert "Traceback" not in proc.stderr + proc.stdout


def test_stale_rank_variables_are_refused(dpsuite, tmp_path, capsys, monkeypatch):
    """RANK/WORLD_SIZE exported by an earlier job used to leave run.json 'running' forever."""
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    assert dpsuite("run", f"results_dir={tmp_path}") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("dpsuite: error: RANK=0 and WORLD_SIZE=2 are set but MASTER_ADDR")
    assert not list(tmp_path.rglob("run.json"))


class ScalarScale(nn.Module):
    """A model with a learnable scalar: FSDP has no first dimension to shard it along."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(40, 10)
        self.scale = nn.Parameter(torch.tensor(1.0))

    def forward(self, x):
        return self.linear(x.flatten(1)) * self.scale


def test_fsdp_refuses_a_workload_with_a_scalar_parameter(dpsuite, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(lookup("mnist1d_mlp"), "build_model", lambda self: ScalarScale())
    out = tmp_path / "res"
    assert dpsuite("run", "workers=2", "sync=fsdp", f"results_dir={out}") == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "dpsuite: error: sync=fsdp cannot shard workload 'mnist1d_mlp': its parameter 'scale' "
        "is a scalar (FSDP shards each parameter along its first dimension); use sync=zero1 "
        "or allreduce, or make it a 1-element tensor"
    )
    assert not out.exists() or not any(out.iterdir()), "no work may start"
    # the same model is fine for a strategy that does not shard parameters
    spec = run_spec.resolve(compose_config(["workers=2", "sync=zero1", f"results_dir={out}"]))
    assert spec.cfg.sync.name == "zero1"


def test_a_sweep_with_one_unworkable_strategy_is_refused_before_the_first_run(
    dpsuite, tmp_path, capsys
):
    out = tmp_path / "res"
    args = ["-m", "workers=2", "sync=zero1,fsdp", "timing.comm_hook=true", f"results_dir={out}"]
    assert dpsuite("run", *args) == 2
    assert "which sync=fsdp does not use" in capsys.readouterr().err
    assert not list(out.rglob("run.json"))
