"""A batch as a workload's loader gives it: a tensor, or a tuple, list or dict of them (nested).

The engine never looks inside a batch beyond this: it moves every tensor to the device, and for
the replicas that need it splits a batch along its first dimension or joins batches along it.
Anything that is not a tensor (a list of file names, an int) travels as it is.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.utils import _pytree as pytree  # torch's own tree walker (DataLoader's structures)


def tensors(batch: Any) -> list[Tensor]:
    return [leaf for leaf in pytree.tree_leaves(batch) if isinstance(leaf, Tensor)]


def size(batch: Any) -> int:
    """Samples in a batch: the first dimension of its first tensor."""
    found = tensors(batch)
    return int(found[0].shape[0]) if found and found[0].dim() > 0 else 0


def problem(batch: Any) -> str | None:
    """Why the engine cannot train on this batch (no tensor, no batch dimension, tensors of
    different lengths), or None."""
    found = tensors(batch)
    if not found:
        return f"a batch must hold tensors, got {describe(batch)}"
    if any(t.dim() == 0 for t in found):
        return f"every tensor of a batch needs a batch dimension, got {describe(batch)}"
    lengths = {int(t.shape[0]) for t in found}
    if len(lengths) > 1:
        return f"the tensors of a batch have different lengths {sorted(lengths)}: {describe(batch)}"
    return None


def describe(batch: Any) -> str:
    """A short description of a batch's structure: ``dict(x: float32[8, 3], y: int64[8])``."""

    def one(leaf: Any) -> str:
        if isinstance(leaf, Tensor):
            return f"{str(leaf.dtype).removeprefix('torch.')}{list(leaf.shape)}"
        return type(leaf).__name__

    if isinstance(batch, dict):
        return "dict(" + ", ".join(f"{k}: {describe(v)}" for k, v in batch.items()) + ")"
    if isinstance(batch, (tuple, list)):
        return f"{type(batch).__name__}(" + ", ".join(describe(v) for v in batch) + ")"
    return one(batch)


def to_device(
    batch: Any,
    device: torch.device,
    float_dtype: torch.dtype,
    image_format: torch.memory_format | None = None,
) -> Any:
    """Every tensor on ``device`` (without waiting for the copy where the source is pinned);
    floating tensors in ``float_dtype``, the parameters' dtype; images (4-D) in
    ``image_format`` when one is given (channels_last)."""

    def move(t: Tensor) -> Tensor:
        dtype = float_dtype if t.is_floating_point() else t.dtype
        t = t.to(device=device, dtype=dtype, non_blocking=True)
        return t.contiguous(memory_format=image_format) if image_format and t.dim() == 4 else t

    return pytree.tree_map_only(Tensor, move, batch)


def strided(batch: Any, first: int, step: int) -> Any:
    """Samples ``first, first + step, ...`` of a batch: what rank ``first`` of ``step`` ranks
    takes of one global batch drawn in sampler order (DistributedSampler deals round-robin)."""
    return pytree.tree_map_only(Tensor, lambda t: t[first::step], batch)


def halves(batch: Any) -> tuple[Any, Any]:
    """The first and second half of a batch (the first takes the odd sample)."""
    n = size(batch)
    cut = (n + 1) // 2
    return (
        pytree.tree_map_only(Tensor, lambda t: t[:cut], batch),
        pytree.tree_map_only(Tensor, lambda t: t[cut:], batch),
    )


def cat(batches: list[Any]) -> Any:
    """One batch of several of the same structure, joined along the batch dimension."""
    if len(batches) == 1:
        return batches[0]
    leaves, spec = zip(*(pytree.tree_flatten(b) for b in batches), strict=True)
    joined = [
        torch.cat(parts) if isinstance(parts[0], Tensor) else parts[0]
        for parts in zip(*leaves, strict=True)
    ]
    return pytree.tree_unflatten(joined, spec[0])
