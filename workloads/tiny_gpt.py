"""A small decoder-only transformer language model, on synthetic tokens or a local text file.

Pre-norm GPT blocks (causal self-attention through ``scaled_dot_product_attention``, GELU MLP),
learned positions, a tied output layer, no dropout (steps stay deterministic). Each sample is
``context`` tokens and the targets are the same tokens shifted by one; the metric is next-token
accuracy (``tiny_gpt``) or, for the convergence study, the loss (``tiny_gpt_loss``: steps to a
target eval loss, a smaller default size).

Synthetic tokens follow a fixed random successor table (``next = table[prev]``) with a
``noise`` fraction of random tokens, so a model can learn up to about ``1 - noise`` accuracy.
A local text file (``text_path``) is read as bytes (vocabulary 256), memory-mapped and window by
window while training (``dpsuite.workloads.token_file``): its non-overlapping windows of
``context + 1`` bytes, the first 80 % for training, the tail for evaluation.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from dpsuite.workloads.base import Data, Datasets, Workload, train_share
from dpsuite.workloads.configs.tiny_gpt import TinyGPTConfig, TinyGPTLossConfig
from dpsuite.workloads.token_file import token_splits, window_count


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )

    def forward(self, x: Tensor) -> Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab: int, context: int, depth: int, width: int, heads: int) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Embedding(context, width)
        self.blocks = nn.Sequential(*[Block(width, heads) for _ in range(depth)])
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.tokens.weight  # tied input/output embedding
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, idx: Tensor) -> Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.blocks(self.tokens(idx) + self.positions(pos))
        return self.head(self.ln(x))


def synthetic_tokens(num: int, context: int, vocab: int, noise: float, seed: int) -> Tensor:
    """``num`` sequences of ``context + 1`` tokens from a noisy successor table."""
    g = torch.Generator().manual_seed(seed)
    table = torch.randperm(vocab, generator=g)
    seqs = torch.empty(num, context + 1, dtype=torch.int64)
    seqs[:, 0] = torch.randint(0, vocab, (num,), generator=g)
    for t in range(1, context + 1):
        random = torch.randint(0, vocab, (num,), generator=g)
        flip = torch.rand(num, generator=g) < noise
        seqs[:, t] = torch.where(flip, random, table[seqs[:, t - 1]])
    return seqs


def text_windows(path: Path, context: int) -> range:
    """Every non-overlapping window of ``context + 1`` bytes of a local file."""
    n = window_count(path, np.uint8, context)
    if n < 10:
        raise ValueError(f"text_path {path} is too short for 10 sequences of {context + 1} bytes")
    return range(n)


class TinyGPTWorkload(Workload):
    """Next-token prediction with a small GPT."""

    Config = TinyGPTConfig
    config: TinyGPTConfig

    @property
    def classes(self) -> int:  # type: ignore[override]
        return self.config.vocab_size

    @property
    def tokens_per_sample(self) -> int:  # type: ignore[override]
        return self.config.context  # each sample predicts `context` next tokens

    @property
    def text_path(self) -> Path | None:
        return Path(self.config.text_path).expanduser() if self.config.text_path else None

    def num_train(self) -> int:
        if self.text_path is not None:
            return train_share(self.text_path.stat().st_size // (self.config.context + 1))
        return train_share(self.config.num_samples)

    def holds_data_in_memory(self) -> bool:
        return self.text_path is None

    def build_model(self) -> nn.Module:
        c = self.config
        return TinyGPT(c.vocab_size, c.context, c.depth, c.width, c.heads)

    def load_data(self) -> Data | Datasets:
        c = self.config
        if self.text_path is not None:
            windows = text_windows(self.text_path, c.context)
            return Datasets(*token_splits(self.text_path, np.uint8, c.context, windows))
        seqs = synthetic_tokens(c.num_samples, c.context, c.vocab_size, c.noise, c.data_seed)
        n_train = train_share(len(seqs))  # 80 % train / 20 % eval
        x, y = seqs[:, :-1].contiguous(), seqs[:, 1:].contiguous()
        return Data(x[:n_train], y[:n_train], x[n_train:], y[n_train:])

    def loss(self, output: Tensor, target: Tensor) -> Tensor:
        return nn.functional.cross_entropy(output.flatten(0, 1), target.flatten())


class TinyGPTLossWorkload(TinyGPTWorkload):
    """Next-token prediction with a small GPT, steps to target counted on the eval loss."""

    Config = TinyGPTLossConfig
    config: TinyGPTLossConfig
    target_metric = "eval_loss"
