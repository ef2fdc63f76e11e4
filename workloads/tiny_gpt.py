"""A small decoder-only transformer language model, on synthetic tokens or a local text file.

Pre-norm GPT blocks (causal self-attention through ``scaled_dot_product_attention``, GELU MLP),
learned positions, a tied output layer, no dropout (steps stay deterministic). Each sample is
``context`` tokens and the targets are the same tokens shifted by one; the metric is next-token
accuracy.

Synthetic tokens follow a fixed random successor table (``next = table[prev]``) with a
``noise`` fraction of random tokens, so a model can learn up to about ``1 - noise`` accuracy.
A local text file (``text_path``) is read as bytes (vocabulary 256).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from workloads.base import Data, Reference, Workload


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


def text_tokens(path: Path, context: int) -> Tensor:
    """Non-overlapping byte sequences of ``context + 1`` tokens from a local file."""
    raw = torch.frombuffer(bytearray(path.read_bytes()), dtype=torch.uint8).to(torch.int64)
    n = raw.numel() // (context + 1)
    if n < 10:
        raise ValueError(f"text_path {path} is too short for 10 sequences of {context + 1} bytes")
    return raw[: n * (context + 1)].view(n, context + 1)


class TinyGPTWorkload(Workload):
    """Next-token prediction with a small GPT."""

    name: ClassVar[str] = "tiny_gpt"
    reference: ClassVar[Reference] = Reference(
        base_lr=0.1, base_batch=32, epochs=5, target_acc=0.85, weight_decay=0.0
    )

    def __init__(
        self,
        num_samples: int = 4000,
        data_seed: int = 42,
        vocab_size: int = 256,
        context: int = 64,
        depth: int = 2,
        width: int = 128,
        heads: int = 4,
        noise: float = 0.1,
        text_path: str | None = None,
        **kw: Any,
    ) -> None:
        super().__init__(
            num_samples=num_samples,
            data_seed=data_seed,
            vocab_size=vocab_size,
            context=context,
            depth=depth,
            width=width,
            heads=heads,
            noise=noise,
            text_path=text_path,
            **kw,
        )
        for key in ("num_samples", "vocab_size", "context", "depth", "width", "heads"):
            if int(self.params[key]) < 1:
                raise ValueError(f"workload.{key} must be >= 1, got {self.params[key]}")
        if int(width) % int(heads):
            raise ValueError(f"workload.width={width} is not divisible by workload.heads={heads}")
        if not 0 <= float(noise) <= 1:
            raise ValueError(f"workload.noise must be in [0, 1], got {noise}")
        self.text_path = Path(text_path).expanduser() if text_path else None
        if self.text_path is not None:
            if not self.text_path.is_file():
                raise ValueError(f"text_path {self.text_path} is not a readable file")
            if int(vocab_size) != 256:
                raise ValueError("a text_path is read as bytes: workload.vocab_size must be 256")
        elif int(num_samples) < 10:
            raise ValueError(f"workload.num_samples must be at least 10, got {num_samples}")
        self.num_samples, self.data_seed = int(num_samples), int(data_seed)
        self.vocab, self.context = int(vocab_size), int(context)
        self.depth, self.width, self.heads = int(depth), int(width), int(heads)
        self.noise = float(noise)

    def build_model(self) -> nn.Module:
        return TinyGPT(self.vocab, self.context, self.depth, self.width, self.heads)

    def load_data(self) -> Data:
        if self.text_path is not None:
            seqs = text_tokens(self.text_path, self.context)
        else:
            seqs = synthetic_tokens(
                self.num_samples, self.context, self.vocab, self.noise, self.data_seed
            )
        n_train = len(seqs) * 4 // 5  # 80 % train / 20 % eval (a text file: its tail)
        x, y = seqs[:, :-1].contiguous(), seqs[:, 1:].contiguous()
        return Data(x[:n_train], y[:n_train], x[n_train:], y[n_train:])

    def loss(self, output: Tensor, target: Tensor) -> Tensor:
        return nn.functional.cross_entropy(output.flatten(0, 1), target.flatten())
