"""The small GPT workload's config (``dpsuite.workloads.tiny_gpt`` builds the model and the
tokens)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

from dpsuite.workloads.configs.base import WorkloadConfig


class TransformerDims(NamedTuple):
    """The sizes of a GPT-style decoder (pre-norm blocks, learned positions, tied output
    layer): what its parameter count and its activations follow from, known without a model."""

    layers: int
    width: int
    heads: int
    context: int
    vocab: int
    checkpointing: bool = False

    @property
    def parameters(self) -> int:
        """Token and position embeddings, per block 12 w^2 + 13 w (LayerNorms, qkv, projection,
        4w MLP, with biases), the final LayerNorm; the output layer is the token embedding."""
        w = self.width
        return (self.vocab + self.context) * w + self.layers * (12 * w * w + 13 * w) + 2 * w


@dataclass
class TinyGPTConfig(WorkloadConfig):
    """A small decoder-only transformer language model (next-token prediction)."""

    class_path: ClassVar[str] = "dpsuite.workloads.tiny_gpt:TinyGPTWorkload"
    small: ClassVar[Mapping[str, Any]] = {
        "num_samples": 200,
        "width": 32,
        "context": 16,
        "depth": 1,
    }

    name: str = "tiny_gpt"
    num_samples: int = field(default=4000, metadata={"ge": 10})
    """Synthetic sequences, 80 % train / 20 % eval (ignored with text_path)."""
    data_seed: int = field(default=42, metadata={"ge": 0})
    """Seed of the synthetic tokens."""
    vocab_size: int = field(default=256, metadata={"ge": 1})
    """Vocabulary (must be 256 with text_path: bytes)."""
    context: int = field(default=64, metadata={"ge": 1})
    """Tokens per sequence."""
    depth: int = field(default=2, metadata={"ge": 1})
    """Transformer blocks."""
    width: int = field(default=128, metadata={"ge": 1})
    """Embedding width (divisible by heads)."""
    heads: int = field(default=4, metadata={"ge": 1})
    """Attention heads."""
    noise: float = field(default=0.1, metadata={"ge": 0, "le": 1})
    """Synthetic: fraction of random tokens (the best accuracy is about 1 - noise)."""
    text_path: str | None = None
    """A local text file, read as bytes (memory-mapped, while training), instead of synthetic
    tokens."""
    base_lr: float = 0.1
    base_batch: int = 32
    epochs: int = 5
    target_acc: float = 0.85
    weight_decay: float = 0.0

    def dims(self) -> TransformerDims:
        return TransformerDims(self.depth, self.width, self.heads, self.context, self.vocab_size)

    def check(self) -> None:
        if self.width % self.heads:
            raise ValueError(
                f"workload.width={self.width} is not divisible by workload.heads={self.heads}"
            )
        if self.text_path:
            path = Path(self.text_path).expanduser()
            if not path.is_file():
                raise ValueError(f"text_path {path} is not a readable file")
            if self.vocab_size != 256:
                raise ValueError("a text_path is read as bytes: workload.vocab_size must be 256")


@dataclass
class TinyGPTLossConfig(TinyGPTConfig):
    """The small GPT scored by its validation loss (steps to a target loss): the convergence
    study's language-model workload, smaller than tiny_gpt's throughput default."""

    class_path: ClassVar[str] = "dpsuite.workloads.tiny_gpt:TinyGPTLossWorkload"

    name: str = "tiny_gpt_loss"
    num_samples: int = field(default=3000, metadata={"ge": 10})
    """Synthetic sequences, 80 % train / 20 % eval (ignored with text_path)."""
    context: int = field(default=32, metadata={"ge": 1})
    """Tokens per sequence."""
    width: int = field(default=64, metadata={"ge": 1})
    """Embedding width (divisible by heads)."""
    base_lr: float = 0.025
    base_batch: int = 4
    epochs: int = 5
    target_loss: float = field(default=1.1, metadata={"gt": 0})
    """Eval loss (mean cross-entropy per token, nats) that counts as reaching the target. The
    synthetic tokens' own entropy bounds it below: about 0.88 nats at noise 0.1, vocabulary 256
    (the unigram entropy, what a model without context reaches, is ln 256 = 5.55)."""
