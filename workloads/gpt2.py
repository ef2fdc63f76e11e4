"""GPT-2-class causal language models by size (124M ... 1.5B) or by their free knobs.

Plain PyTorch in the style of nanoGPT (Karpathy): the pre-norm blocks of
``dpsuite.workloads.tiny_gpt``
(causal attention through ``scaled_dot_product_attention``, which picks the flash or efficient
kernel on a GPU), learned positions, a tied output layer, GPT-2's initialisation (residual
projections scaled by 1/sqrt(2 x layers)), no dropout. Not ``transformers``: the model is ~40
lines here, it needs no extra dependency or hub access, and every FLOP it spends is visible to
the FLOP counter and to ``torch.compile`` without wrapper layers.

Data is what throughput benchmarks use: uniform random tokens, generated once in memory and
copied to the device once, so no input pipeline is measured (accuracy on them is not
meaningful: about 1 / vocab). ``token_path`` reads real tokens instead: a local file of uint16
token ids (the ``train.bin`` nanoGPT's data preparation writes), never downloaded, memory-mapped
and read window by window while training (``dpsuite.workloads.token_file``): ``num_samples``
windows of ``context + 1`` tokens spaced evenly over the whole file (every window when it holds
no more), the first 80 % for training and the file's tail for evaluation.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from dpsuite.workloads.base import Data, Datasets, train_share
from dpsuite.workloads.configs.gpt2 import SIZES, GPT2Config
from dpsuite.workloads.tiny_gpt import TinyGPT, TinyGPTWorkload
from dpsuite.workloads.token_file import spread_windows, token_splits, window_count

TOKEN_DTYPE = np.uint16  # nanoGPT's token files: GPT-2's 50257 ids fit in 16 bits


class GPT2(TinyGPT):
    """A GPT-2 decoder, optionally recomputing each block's activations in backward."""

    def __init__(
        self, vocab: int, context: int, layers: int, width: int, heads: int, checkpointing: bool
    ) -> None:
        super().__init__(vocab, context, layers, width, heads)
        self.checkpointing = checkpointing
        for block in self.blocks:  # GPT-2: the residual stream grows with depth; scale it back
            for proj in (block.proj, block.mlp[2]):
                nn.init.normal_(proj.weight, std=0.02 / math.sqrt(2 * layers))

    def forward(self, idx: Tensor) -> Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tokens(idx) + self.positions(pos)
        for block in self.blocks:
            if self.checkpointing and self.training:
                x = checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        return self.head(self.ln(x))


def random_tokens(num: int, context: int, vocab: int, seed: int) -> Tensor:
    """``num`` sequences of ``context + 1`` uniform random token ids."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (num, context + 1), generator=g)


class GPT2Workload(TinyGPTWorkload):
    """Next-token prediction with a GPT-2-class model."""

    name: ClassVar[str] = "gpt2"
    Config = GPT2Config  # type: ignore[assignment]
    config: GPT2Config  # type: ignore[assignment]

    @property
    def token_path(self) -> Path | None:
        return Path(self.config.token_path).expanduser() if self.config.token_path else None

    @property
    def synthetic_data(self) -> bool:  # type: ignore[override]
        return self.token_path is None

    @property
    def eval_chunk(self) -> int:  # type: ignore[override]
        return self.config.eval_batch

    def label(self) -> str:
        c = self.config
        layers, width, _ = c.shape()
        named = (layers, width) == SIZES[c.size][:2]
        return f"{c.name}-{c.size}" if named else f"{c.name}-{layers}x{width}"

    def num_train(self) -> int:
        c, path = self.config, self.token_path
        available = window_count(path, TOKEN_DTYPE, c.context) if path else c.num_samples
        return train_share(min(c.num_samples, available))

    def holds_data_in_memory(self) -> bool:
        return self.token_path is None

    def build_model(self) -> nn.Module:
        c = self.config
        layers, width, heads = c.shape()
        return GPT2(c.vocab_size, c.context, layers, width, heads, c.activation_checkpointing)

    def load_data(self) -> Data | Datasets:
        c, path = self.config, self.token_path
        if path is not None:
            windows = spread_windows(window_count(path, TOKEN_DTYPE, c.context), c.num_samples)
            return Datasets(*token_splits(path, TOKEN_DTYPE, c.context, windows))
        seqs = random_tokens(c.num_samples, c.context, c.vocab_size, c.data_seed)
        n_train = train_share(len(seqs))
        x, y = seqs[:, :-1].contiguous(), seqs[:, 1:].contiguous()
        return Data(x[:n_train], y[:n_train], x[n_train:], y[n_train:])
