"""The GPT-2-class workload's config: its published sizes and free knobs (``dpsuite.workloads.gpt2``
builds the model and the tokens)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from dpsuite.workloads.configs.base import WorkloadConfig
from dpsuite.workloads.configs.tiny_gpt import TransformerDims

# GPT-2's published sizes (Radford et al. 2019): layers, width, heads.
SIZES = {
    "124M": (12, 768, 12),
    "355M": (24, 1024, 16),
    "774M": (36, 1280, 20),
    "1.5B": (48, 1600, 25),
}
# Other names of the sizes: Hugging Face's model ids, and the runs' workload labels.
SIZE_NAMES = {
    "gpt2-small": "124M",
    "gpt2-medium": "355M",
    "gpt2-large": "774M",
    "gpt2-xl": "1.5B",
    **{f"gpt2-{size}": size for size in SIZES},
    **{size: size for size in SIZES},
}


@dataclass
class GPT2Config(WorkloadConfig):
    """A GPT-2-class causal LM: a named size, or layers/width/heads of your own."""

    class_path: ClassVar[str] = "dpsuite.workloads.gpt2:GPT2Workload"
    small: ClassVar[Mapping[str, Any]] = {
        "layers": 2,
        "width": 32,
        "heads": 2,
        "context": 16,
        "vocab_size": 128,
        "num_samples": 400,
    }

    name: str = "gpt2"
    size: str = field(default="124M", metadata={"choices": tuple(SIZES)})
    """GPT-2 size: 124M (12 layers x 768), 355M (24 x 1024), 774M (36 x 1280), 1.5B (48 x 1600)."""
    layers: int | None = field(default=None, metadata={"ge": 1})
    """Transformer blocks (null: the size's)."""
    width: int | None = field(default=None, metadata={"ge": 1})
    """Embedding width, divisible by heads (null: the size's)."""
    heads: int | None = field(default=None, metadata={"ge": 1})
    """Attention heads (null: the size's)."""
    context: int = field(default=1024, metadata={"ge": 1})
    """Tokens per sequence."""
    vocab_size: int = field(default=50304, metadata={"ge": 2})
    """Vocabulary: GPT-2's 50257 padded to a multiple of 64 (nanoGPT), for faster matmuls."""
    num_samples: int = field(default=2560, metadata={"ge": 10})
    """Sequences, 80 % train / 20 % eval: random ones held in memory, or this many windows
    spread over token_path (read memory-mapped; all of them if the file holds fewer)."""
    data_seed: int = field(default=42, metadata={"ge": 0})
    """Seed of the random tokens."""
    token_path: str | None = None
    """A local file of uint16 token ids (nanoGPT's train.bin) instead of random tokens, read
    memory-mapped while training (never whole into memory)."""
    activation_checkpointing: bool = False
    """Recompute each block's activations in backward: less memory, about 1/3 more compute."""
    eval_batch: int = field(default=8, metadata={"ge": 1})
    """Sequences per forward pass in evaluation (the logits are eval_batch x context x vocab)."""
    base_lr: float = 0.1
    base_batch: int = 512
    epochs: int = 1
    target_acc: float = 0.5
    weight_decay: float = 0.0

    def shape(self) -> tuple[int, int, int]:
        """Layers, width and heads: the size's, each replaced by its knob when set."""
        layers, width, heads = SIZES[self.size]
        return self.layers or layers, self.width or width, self.heads or heads

    def dims(self) -> TransformerDims:
        layers, width, heads = self.shape()
        return TransformerDims(
            layers, width, heads, self.context, self.vocab_size, self.activation_checkpointing
        )

    def check(self) -> None:
        _, width, heads = self.shape()
        if width % heads:
            raise ValueError(f"workload.width={width} is not divisible by workload.heads={heads}")
        if self.token_path:
            path = Path(self.token_path).expanduser()
            if not path.is_file():
                raise ValueError(f"token_path {path} is not a readable file")
            if path.stat().st_size // 2 < 10 * (self.context + 1):
                raise ValueError(f"token_path {path} is too short for 10 sequences")
