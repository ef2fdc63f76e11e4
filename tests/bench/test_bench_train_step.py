"""pytest-benchmark: one training step of each workload (one process, the suite's own step)."""

from __future__ import annotations

import pytest
import torch

from dpsuite import workloads
from dpsuite.optim.precision import Precision

# workload -> (parameters, batch): the default models, small datasets (size does not matter here)
CASES = {
    "mnist1d_mlp": ({"num_samples": 1000}, 32),
    "mnist1d_cnn": ({"num_samples": 1000}, 32),
    "cifar_resnet": ({"num_samples": 200}, 32),
    "tiny_gpt": ({"num_samples": 200}, 32),
}


@pytest.mark.parametrize("name", list(CASES))
def test_training_step(benchmark, name, tmp_path):
    params, batch = CASES[name]
    w = workloads.get_workload(name, cache_dir=tmp_path, **params)
    data = w.load_data()
    torch.manual_seed(0)
    model = w.build_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    amp = Precision.create("fp32", torch.device("cpu"))
    idx = torch.arange(batch)
    x = data.train_x if not data.train_x.is_floating_point() else data.train_x.float()

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with amp.autocast():
            loss = w.loss(model(x[idx]), data.train_y[idx])
        amp.backward(loss)
        opt.step()

    benchmark.extra_info.update(workload=name, batch=batch, threads=torch.get_num_threads())
    benchmark.pedantic(step, rounds=5 if name == "cifar_resnet" else 20, warmup_rounds=2)
