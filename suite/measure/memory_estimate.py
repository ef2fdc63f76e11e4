"""How much host memory a run's ranks will need, estimated from the model before any starts.

Per rank, in bytes: the parameters (count x bytes of the parameter dtype: 8 in fp64, else 4;
autocast keeps fp32 parameters), their gradients (as many), the optimizer's state (momentum
SGD and LARS keep one momentum buffer per parameter; SGD without momentum none), DDP's gradient
buckets (one more copy of the gradients, with more than one rank and a strategy built on DDP),
the activations at the
rank's batch, the workload's data held in memory (none where ``Workload.holds_data_in_memory``
says its Datasets read samples while training), and the import footprint every rank has before
its first buffer (``dpsuite.runtime.host_memory.rank_footprint``).

Sharding divides parts among the ranks (each strategy's ``sharded_parts``): ``zero1`` the
optimizer state, ``fsdp`` parameters, gradients and optimizer state (and, without DDP, no
buckets). A strategy that shards the parameters also holds them whole at times: its
evaluations gather them into a plain copy of the model on every rank (one tensor gathered at a
time beside that copy), and with ``reshard_after_forward`` off every unit stays gathered from
its forward to its backward. That is the ``gathered`` part, one unsharded copy of the
parameters; the units gathered for a moment at ZeRO-3 are smaller and never coexist with it.

The parameter count comes without allocating the model: a GPT-style workload's config computes
it from its sizes (``TransformerDims``); any other model is built on the meta device.

Activations, by one of two rules (the estimate names which):

* ``transformer``: layers x batch x context x (18 x width + heads x context) elements (what a
  pre-norm block saves for backward: its inputs, LayerNorm outputs, qkv, attention output, the
  4w MLP's two activations; and one attention matrix per head where the attention kernel keeps
  it), plus 3 x batch x context x vocab for the logits, their log-softmax and gradient. With
  activation checkpointing only each block's input is kept, and one block's activations at a
  time. 4 bytes an element (8 in fp64): autocast's 2-byte activations make this an upper bound.
* ``measured``: one forward pass on the meta device at the rank's batch (no memory used),
  summing every tensor autograd saves for backward (parameters excepted), plus the output; the
  sum counts views of one tensor more than once, so it errs high.

An evaluation pass (at the workload's ``eval_chunk``, often far above the training batch) keeps
no graph but holds large outputs; its share is 2 x vocab + 4 x width elements per token for a
transformer, and 4 x the largest module output for a measured model (a layer's input, output
and workspace). The activations part is the larger of training's and evaluation's: they never
coexist.

Without either (a plugin that gives no ``sample_shape``, a model the meta device cannot run)
activations are left out and the estimate says so.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from torch import nn

from dpsuite.measure.meta_model import META_LIMIT_S, measured_once, on_meta_model
from dpsuite.workloads.base import Workload
from dpsuite.workloads.contained import Escaped, call_contained

TRANSFORMER_WIDTH_FACTOR = 18  # elements saved per token per block, per unit of width
# Logits, their log-softmax (saved by cross-entropy), and in backward the gradients of both.
LOGIT_COPIES = 4
EVAL_COPIES = 4  # an evaluation forward: a layer's input, output and workspace, at its largest
DATA_ELEMENT_BYTES = 4  # float32 inputs (uint8 images are counted high)


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes one rank needs, by part, and how many ranks share this host."""

    parameters: int  # the model's parameter count
    parts: dict[str, int] = field(default_factory=dict)  # bytes per rank, by part
    ranks: int = 1
    activation_rule: str = "none"  # transformer, measured or none (not estimated)

    @property
    def per_rank(self) -> int:
        return sum(self.parts.values())

    @property
    def total(self) -> int:
        return self.per_rank * self.ranks


def parameter_count(workload: Workload) -> int:
    """The model's parameters, computed from the config or counted on the meta device (0 when
    the workload's own code cannot build it: its run fails, and says why, when it loads)."""
    dims = getattr(workload.config, "dims", None)
    if callable(dims):
        return dims().parameters

    counted = on_meta_model(
        "parameters", workload, lambda model: sum(p.numel() for p in model.parameters())
    )
    return counted or 0


def transformer_activation_elements(dims, batch: int) -> int:
    """Elements a GPT-style decoder keeps for backward at ``batch`` sequences (the rule above)."""
    tokens = batch * dims.context
    per_block = tokens * (TRANSFORMER_WIDTH_FACTOR * dims.width + dims.heads * dims.context)
    if dims.checkpointing:  # each block's input, and one block recomputed at a time
        blocks = tokens * dims.width * dims.layers + per_block
    else:
        blocks = per_block * dims.layers
    return blocks + LOGIT_COPIES * tokens * dims.vocab


def _meta_forward(workload: Workload, batch: int, hooks) -> torch.Tensor | None:
    """One forward pass at ``batch`` on the meta device inside ``hooks`` (None: cannot)."""

    def forward() -> torch.Tensor | None:
        shape = workload.sample_shape()
        if shape is None:
            return None
        with torch.device("meta"):  # the device mode and autograd's hooks are per thread
            model = workload.build_model()
            x = torch.zeros(batch, *shape)
        with hooks(model):
            return model(x)

    # A workload's own code runs contained: whatever it raises or however it exits (an op
    # without a meta kernel, a plugin's sys.exit), there is no estimate rather than no run.
    try:
        return call_contained(forward, META_LIMIT_S, "meta-forward")
    except Escaped:
        return None


def measured_activation_bytes(workload: Workload, batch: int) -> int | None:
    """Bytes autograd saves in one training forward at ``batch`` (None: cannot tell)."""
    saved = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal saved
        if not isinstance(t, nn.Parameter):
            saved += t.numel() * t.element_size()
        return t

    def measure() -> int | None:
        out = _meta_forward(
            workload, batch, lambda _: torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)
        )
        return None if out is None else saved + out.numel() * out.element_size()

    return measured_once("train-activations", workload, batch, measure)


@contextlib.contextmanager
def _largest_output(model: nn.Module, found: list[int]) -> Iterator[None]:
    """Record in ``found`` the bytes of the largest output of any of ``model``'s modules."""

    def hook(_module, _inputs, out) -> None:
        if isinstance(out, torch.Tensor):
            found.append(out.numel() * out.element_size())

    handles = [m.register_forward_hook(hook) for m in model.modules()]
    try:
        with torch.no_grad():
            yield
    finally:
        for h in handles:
            h.remove()


def measured_eval_bytes(workload: Workload, batch: int) -> int | None:
    """What an evaluation forward at ``batch`` holds at once: EVAL_COPIES x its largest
    module output (no graph is kept, but a layer's input, output and workspace coexist)."""

    def measure() -> int | None:
        found: list[int] = []
        out = _meta_forward(workload, batch, lambda model: _largest_output(model, found))
        return None if out is None or not found else EVAL_COPIES * max(found)

    return measured_once("eval-activations", workload, batch, measure)


def data_bytes(workload: Workload) -> int:
    """The workload's data as each rank holds it: train and eval inputs and targets (none for
    a workload whose Datasets read their samples while training)."""
    if not workload.holds_data_in_memory():
        return 0
    samples = math.ceil(workload.num_train() * 5 / 4)  # the train split is 80 % of the samples
    dims = getattr(workload.config, "dims", None)
    if callable(dims):  # token ids (int64): inputs and their shifted targets
        return samples * 2 * dims().context * 8
    shape = workload.sample_shape()
    per_sample = math.prod(shape) * DATA_ELEMENT_BYTES if shape else 0
    return samples * (per_sample + 8)


def eval_batch(workload: Workload) -> int:
    """Samples per evaluation forward: the workload's chunk, at most the eval split."""
    return max(1, min(workload.eval_chunk, math.ceil(workload.num_train() / 4)))


def activations(workload: Workload, batch: int, element: int) -> tuple[int | None, str]:
    """Activation bytes, the larger of a training step's at ``batch`` and an evaluation's
    (they never coexist), and the rule that gave them."""
    dims = getattr(workload.config, "dims", None)
    evaluating = eval_batch(workload)
    if callable(dims):
        d = dims()
        train = transformer_activation_elements(d, batch)
        evaluation = evaluating * d.context * (2 * d.vocab + 4 * d.width)
        return max(train, evaluation) * element, "transformer"
    train = measured_activation_bytes(workload, batch)
    if train is None:
        return None, "none"
    evaluation = measured_eval_bytes(workload, evaluating) or 0
    return max(train, evaluation) * element // 4, "measured"  # meta tensors are float32


def estimate(
    workload: Workload,
    batch: int,
    precision: str,
    momentum_buffers: int,
    ranks: int,
    ddp: bool,
    footprint: int,
    sharded: tuple[str, ...] = (),
    shards: int = 1,
) -> MemoryEstimate:
    """The estimate for ``ranks`` ranks on this host, each training at ``batch`` samples.

    ``momentum_buffers``: parameter-sized copies the optimizer keeps; ``ddp``: gradients are
    also copied into DDP's buckets; ``footprint``: bytes a rank holds before its own buffers;
    ``sharded``: the parts (of parameters, gradients, optimizer) each of ``shards`` ranks
    keeps only its share of.
    """
    count = parameter_count(workload)
    element = 8 if precision == "fp64" else 4
    weights = count * element
    acts, rule = activations(workload, batch, element)
    parts = {
        "parameters": weights,
        "gradients": weights,
        "optimizer": weights * momentum_buffers,
        "ddp_buckets": weights if ddp else 0,
        "activations": acts or 0,
        "data": data_bytes(workload),
        "import": footprint,
    }
    for part in sharded:
        parts[part] = math.ceil(parts[part] / shards)
    if "parameters" in sharded and shards > 1:
        parts["gathered"] = weights
    return MemoryEstimate(count, parts, ranks, rule)
