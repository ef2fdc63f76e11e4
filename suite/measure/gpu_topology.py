"""GPU driver, models and interconnect from NVML (nvidia-ml-py): what ``nvidia-smi topo -m``
shows, in a form that fits one field of a results record.

The topology is a matrix over the GPUs this process sees (CUDA_VISIBLE_DEVICES order), one row
per GPU: ``X`` on the diagonal, ``NV<k>`` where k NVLinks join the pair (directly, or through
NVSwitches, which every switch-attached GPU shares), else the closest PCIe path as nvidia-smi
names it: ``PIX`` (one PCIe switch), ``PXB`` (several switches), ``PHB`` (a host bridge),
``NODE`` (host bridges in one NUMA node), ``SYS`` (across NUMA nodes).
"""

from __future__ import annotations

from collections import Counter
from typing import Any


class NvmlUnavailable(Exception):
    """nvidia-ml-py is not installed, or NVML cannot start on this machine."""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _nvml():
    try:
        import pynvml
    except ImportError as exc:
        raise NvmlUnavailable("nvidia-ml-py is not installed") from exc
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise NvmlUnavailable(f"NVML: {exc}") from exc
    return pynvml


def _visible_handles(nvml) -> list:
    """NVML handles of the GPUs torch sees, in torch's order (NVML counts every GPU)."""
    import torch

    handles = []
    for i in range(torch.cuda.device_count()):
        uuid = getattr(torch.cuda.get_device_properties(i), "uuid", None)
        try:
            handles.append(nvml.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}"))
        except nvml.NVMLError:  # no uuid in this torch, or a MIG slice: by index
            handles.append(nvml.nvmlDeviceGetHandleByIndex(i))
    return handles


def _nvlink_peers(nvml, handle) -> Counter:
    """Active NVLinks of one GPU, counted by the PCI bus id at their other end."""
    peers: Counter = Counter()
    for link in range(nvml.NVML_NVLINK_MAX_LINKS):
        try:
            if nvml.nvmlDeviceGetNvLinkState(handle, link) != nvml.NVML_FEATURE_ENABLED:
                continue
            remote = nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link)
        except nvml.NVMLError:  # no such link on this GPU, or no NVLink at all
            continue
        peers[_text(remote.busId).upper()] += 1
    return peers


PCIE_PATHS = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}


def topology(nvml, handles: list) -> tuple[str, list[int]]:
    """The pair matrix as ``GPU0: X NV18; GPU1: NV18 X`` and each GPU's active NVLinks."""
    buses = [_text(nvml.nvmlDeviceGetPciInfo(h).busId).upper() for h in handles]
    peers = [_nvlink_peers(nvml, h) for h in handles]
    # links whose far end is no GPU of this machine go to NVSwitches
    switched = [sum(n for bus, n in p.items() if bus not in buses) for p in peers]
    rows = []
    for i, hi in enumerate(handles):
        cells = []
        for j, hj in enumerate(handles):
            links = peers[i][buses[j]] + min(switched[i], switched[j])
            if i == j:
                cells.append("X")
            elif links:
                cells.append(f"NV{links}")
            else:
                try:
                    level = nvml.nvmlDeviceGetTopologyCommonAncestor(hi, hj)
                    cells.append(PCIE_PATHS.get(int(level), "?"))
                except nvml.NVMLError:
                    cells.append("?")
        rows.append(f"GPU{i}: " + " ".join(cells))
    return "; ".join(rows), [sum(p.values()) for p in peers]


def _pcie(nvml, handle) -> str | None:
    try:
        gen = nvml.nvmlDeviceGetMaxPcieLinkGeneration(handle)
        width = nvml.nvmlDeviceGetMaxPcieLinkWidth(handle)
    except nvml.NVMLError:
        return None
    return f"gen{gen} x{width}"


def nvml_details() -> dict[str, Any]:
    """Driver, models, PCIe link (max generation and width), NVLinks and the pair matrix."""
    nvml = _nvml()
    try:
        handles = _visible_handles(nvml)
        matrix, nvlinks = topology(nvml, handles)
        return {
            "gpu_driver": _text(nvml.nvmlSystemGetDriverVersion()),
            "gpu_models": ", ".join(_text(nvml.nvmlDeviceGetName(h)) for h in handles),
            "gpu_pcie": ", ".join(sorted({_pcie(nvml, h) or "?" for h in handles})),
            "gpu_nvlinks": ", ".join(str(n) for n in sorted(set(nvlinks))),
            "gpu_topology": matrix,
        }
    except nvml.NVMLError as exc:
        raise NvmlUnavailable(f"NVML: {exc}") from exc
    finally:
        nvml.nvmlShutdown()
