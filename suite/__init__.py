"""dpsuite: a benchmark suite for data-parallel training."""

__version__ = "0.1.0"
