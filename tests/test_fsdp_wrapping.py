"""FSDP's wrapping policy (``sync.wrap``): which submodules of each built-in model become
units of their own, and the model's structure kept for evaluation."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from dpsuite.sync.fsdp import meta_copy, wrap_units
from dpsuite.workloads import CONFIGS, get_workload


def model(name: str, **sizes: int) -> nn.Module:
    return get_workload(name, **{**CONFIGS[name].small, **sizes}).build_model()


def kinds(units: list[nn.Module]) -> list[str]:
    return [type(u).__name__ for u in units]


@pytest.mark.parametrize(
    "name,sizes,blocks",
    [
        ("mnist1d_mlp", {}, ["Linear"] * 3),
        ("cifar_resnet", {}, ["BasicBlock"] * 8),  # the residual blocks of the three stages
        ("gpt2", {}, ["Block"] * 2),  # the transformer blocks
        ("tiny_gpt", {"depth": 3}, ["Block"] * 3),
    ],
)
def test_blocks_are_the_repeated_blocks_of_each_model(name, sizes, blocks):
    assert kinds(wrap_units(model(name, **sizes), "blocks")) == blocks


def test_without_repeated_blocks_the_top_level_children_are_the_units():
    spread = nn.Sequential(nn.Linear(2, 4), nn.ReLU(), nn.Sequential(nn.Conv1d(1, 1, 1)))
    assert kinds(wrap_units(spread, "blocks")) == ["Linear", "Sequential"]
    resnet = model("cifar_resnet")
    assert kinds(wrap_units(resnet, "children")) == kinds(
        [c for c in resnet.children() if any(True for _ in c.parameters())]
    )
    assert wrap_units(resnet, "root") == []


def test_units_never_nest():
    units = wrap_units(model("gpt2"), "blocks")
    inner = {id(m) for u in units for m in u.modules() if m is not u}
    assert not any(id(u) in inner for u in units)


def test_the_meta_copy_has_the_structure_and_no_data():
    net = model("gpt2")
    shell = meta_copy(net)
    assert shell.state_dict().keys() == net.state_dict().keys()
    assert all(p.device.type == "meta" for p in shell.parameters())
    assert all(p.device.type == "cpu" for p in net.parameters())  # the model is untouched
    restored = shell.to_empty(device=torch.device("cpu"))
    restored.load_state_dict(net.state_dict())
    x = torch.randint(0, 128, (2, 16))
    assert torch.equal(restored(x), net(x))
