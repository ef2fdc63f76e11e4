"""The hardware fingerprint: the CPU model, collect_env facts, NVML topology, environment."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from dpsuite.measure import fingerprint as fp
from dpsuite.measure import gpu_topology
from tests.conftest import REPO


def test_relevant_env_keeps_what_changes_a_measurement_and_no_credentials():
    environ = {
        "NCCL_DEBUG": "INFO",
        "NCCL_IB_HCA": "mlx5",
        "TORCH_NCCL_BLOCKING_WAIT": "1",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "OMP_NUM_THREADS": "4",
        "GLOO_SOCKET_IFNAME": "eth0",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
        "HOME": "/root",
        "PATH": "/usr/bin",
        "NCCL_TEST_API_KEY": "secret",
        "WANDB_API_KEY": "secret",
    }
    assert fp.relevant_env(environ) == {
        "CUDA_VISIBLE_DEVICES": "0,1",
        "GLOO_SOCKET_IFNAME": "eth0",
        "NCCL_DEBUG": "INFO",
        "NCCL_IB_HCA": "mlx5",
        "OMP_NUM_THREADS": "4",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
        "TORCH_NCCL_BLOCKING_WAIT": "1",
    }


def test_the_environment_recorded_is_the_one_the_command_started_with():
    # dpsuite sets OMP_NUM_THREADS for the workers it spawns; a later run of the same process
    # must not record the previous run's value as if the user had set it.
    code = (
        "import json, os\n"
        "from dpsuite.measure.fingerprint import fingerprint\n"
        "os.environ['OMP_NUM_THREADS'] = '7'\n"
        "print(json.dumps(fingerprint(None, 'gloo', 1, 1, 1)))\n"
    )
    env = {"PATH": "/usr/bin:/bin", "NCCL_DEBUG": "WARN", "NCCL_ALGO": "Ring"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env
    )
    assert out.returncode == 0, out.stderr
    record = json.loads(out.stdout)
    assert record["env"] == {"NCCL_ALGO": "Ring", "NCCL_DEBUG": "WARN"}
    for key in ("os_release", "libc", "torch_debug_build", "gpu_driver", "gpu_topology"):
        assert key in record, key


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists(), reason="no /proc/cpuinfo here")
def test_cpu_model_is_the_kernels_model_name_so_machine_ids_stay_the_same():
    names = [
        line.split(":", 1)[1].strip()
        for line in Path("/proc/cpuinfo").read_text().splitlines()
        if line.startswith("model name")
    ]
    if not names:
        pytest.skip("this CPU's /proc/cpuinfo has no model name")
    assert fp.cpu_model() == names[0]


def test_what_cannot_change_is_read_once_per_process():
    for read in (fp.cpu_model, fp.system_software, fp.gpu_details):
        read()
        hits = read.cache_info().hits
        fp.fingerprint(None, "gloo", 1, 1, 1)
        assert read.cache_info().hits == hits + 1, read.__name__


class FakeNvml:
    """NVML's answers for a machine described by its GPUs' PCI buses and links (test input)."""

    NVML_NVLINK_MAX_LINKS = 18
    NVML_FEATURE_ENABLED = 1

    class NVMLError(Exception):
        pass

    def __init__(self, buses: list[str], links: dict[int, list[str]], pcie: dict) -> None:
        self.buses, self.links, self.pcie = buses, links, pcie

    def nvmlDeviceGetPciInfo(self, h):  # noqa: N802 (NVML's names)
        return SimpleNamespace(busId=self.buses[h].encode())

    def nvmlDeviceGetNvLinkState(self, h, link):  # noqa: N802
        if link >= len(self.links.get(h, [])):
            raise self.NVMLError("not supported")
        return 1

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h, link):  # noqa: N802
        return SimpleNamespace(busId=self.links[h][link])

    def nvmlDeviceGetTopologyCommonAncestor(self, a, b):  # noqa: N802
        return self.pcie[frozenset((a, b))]


def test_topology_counts_direct_and_switched_nvlinks_and_names_pcie_paths():
    buses = ["0000:07:00.0", "0000:0F:00.0", "0000:47:00.0"]
    # GPU0-GPU1: 2 direct links; GPU2 has no NVLink; the PCIe paths between them differ
    nvml = FakeNvml(
        buses,
        {0: [buses[1], buses[1]], 1: [buses[0], buses[0]]},
        {frozenset((0, 2)): 40, frozenset((1, 2)): 50},
    )
    matrix, nvlinks = gpu_topology.topology(nvml, [0, 1, 2])
    assert matrix == "GPU0: X NV2 NODE; GPU1: NV2 X SYS; GPU2: NODE SYS X"
    assert nvlinks == [2, 2, 0]
    # four GPUs whose 18 links each go to NVSwitches: every pair is NV18
    switches = [f"0000:{0xA0 + k:02X}:00.0" for k in range(4)]
    nvml = FakeNvml(
        [f"0000:{k:02X}:00.0" for k in range(4)],
        {g: [switches[k % 4] for k in range(18)] for g in range(4)},
        {},
    )
    matrix, nvlinks = gpu_topology.topology(nvml, [0, 1, 2, 3])
    rows = [f"GPU{g}: " + " ".join("X" if h == g else "NV18" for h in range(4)) for g in range(4)]
    assert matrix == "; ".join(rows) and nvlinks == [18] * 4
