"""A missing or broken torchvision is one line naming the torchvision build for the installed
torch (version and PyTorch index), not a hint that would install PyPI's newest one."""

import pytest
import torch

from dpsuite.workloads.configs.torchvision_pair import install_command, torchvision_for
from tests.conftest import run_subprocess


@pytest.mark.parametrize(
    ("torch_version", "cuda", "hip", "expected"),
    [
        (
            "2.13.0+cpu",
            None,
            None,
            "torchvision==0.28.0 --index-url https://download.pytorch.org/whl/cpu",
        ),
        (
            "2.13.0",
            "13.0",
            None,
            "torchvision==0.28.0 --index-url https://download.pytorch.org/whl/cu130",
        ),
        (
            "2.5.1+cu124",
            "12.4",
            None,
            "torchvision==0.20.1 --index-url https://download.pytorch.org/whl/cu124",
        ),
        (
            "2.7.0+rocm6.3",
            None,
            "6.3.42131",
            "torchvision==0.22.0 --index-url https://download.pytorch.org/whl/rocm6.3",
        ),
        ("1.13.1", None, None, "torchvision --index-url https://download.pytorch.org/whl/cpu"),
    ],
)
def test_the_command_names_the_pair_and_the_builds_index(torch_version, cuda, hip, expected):
    assert install_command(torch_version, cuda, hip) == f"pip install {expected}"


def test_torchvision_minor_is_torchs_plus_15():
    assert torchvision_for("2.0.0") == "0.15.0" and torchvision_for("2.13.0+cpu") == "0.28.0"


def test_a_cuda_torchvision_beside_a_cpu_torch_is_one_line_with_the_right_pair(tmp_path):
    # What a mismatched build does on import: its C++ operators fail to register.
    fake = tmp_path / "torchvision"
    fake.mkdir()
    (fake / "__init__.py").write_text(
        'raise RuntimeError("operator torchvision::nms does not exist")\n'
    )
    done = run_subprocess("run", "workload=torchvision", env={"PYTHONPATH": str(tmp_path)})
    assert done.returncode == 2 and "Traceback" not in done.stderr
    [line] = done.stderr.strip().splitlines()
    assert "operator torchvision::nms does not exist" in line
    assert install_command(torch.__version__, torch.version.cuda, None) in line
    assert f"torch {torch.__version__}" in line
