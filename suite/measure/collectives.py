"""The collectives `dpsuite comm-bench` measures, with nccl-tests' sizes, bandwidths and checks.

Sizes and bandwidths are nccl-tests' (doc/PERFORMANCE.md and each test's GetCollByteCount and
GetBw). The size S of a row is the larger of a rank's input and output buffer: the reduced
buffer of all_reduce, the gathered output of all_gather, the input of reduce_scatter, the
broadcast buffer, all_to_all's send buffer (its n pieces). For the three that split S into n
pieces, S is rounded down to a whole number of elements per piece, as nccl-tests does. Then
algbw = S / t and busbw = algbw x the collective's factor, the rate each rank's link must
sustain, comparable across rank counts: all_reduce 2(n-1)/n; all_gather, reduce_scatter and
all_to_all (n-1)/n; broadcast 1.

Correctness: every rank's input is filled with a known pattern, and every element of every
rank's output is compared with what the collective must give. Reductions sum
x_r[i] = ((i + r) mod 4) + 1 (partial sums are small integers, exact in fp32, and in bf16 up
to 64 ranks); the others move y_r[i] = ((i + 37 r) mod 251) + 1, which differs between any two
ranks and between offsets that are not multiples of 251, so data from the wrong rank or place is
caught (values up to 252: exact in bf16).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

SUM_PERIOD = 4
MOVE_PERIOD = 251  # prime: a shift by any offset < 251 or any other rank changes the value
MOVE_RANK_STRIDE = 37
CHUNK = 1 << 20  # elements handled at a time when filling and checking (bounded memory)
ROOT = 0  # broadcast's root, as in nccl-tests' default


def _newer(name: str, older: str) -> Callable:
    """A torch.distributed function under its current name, or its older name on old torch."""
    return getattr(dist, name, None) or getattr(dist, older)


def sum_pattern(index: torch.Tensor, rank: int) -> torch.Tensor:
    return (index + rank) % SUM_PERIOD + 1


def move_pattern(index: torch.Tensor, rank: int | torch.Tensor) -> torch.Tensor:
    return (index + MOVE_RANK_STRIDE * rank) % MOVE_PERIOD + 1


def summed(index: torch.Tensor, world: int) -> torch.Tensor:
    """The exact sum over ranks of sum_pattern at ``index``, in float64."""
    sums = torch.tensor(
        [sum((k + r) % SUM_PERIOD + 1 for r in range(world)) for k in range(SUM_PERIOD)],
        dtype=torch.float64,
        device=index.device,
    )
    return sums[index % SUM_PERIOD]


@dataclass(frozen=True)
class Collective:
    """One collective: how big its buffers are, how it runs, and what it must return.

    ``split``: S is cut into n pieces (input or output is S/n). ``reduces``: the output is a sum
    of the ranks' inputs. ``expected(index, rank, world, piece)``: the correct output of ``rank``
    at output positions ``index`` (float64), ``piece`` being S/n in elements.
    """

    name: str
    bus_factor: Callable[[int], float]
    split: bool
    reduces: bool
    expected: Callable[[torch.Tensor, int, int, int], torch.Tensor]

    def count(self, size_bytes: int, itemsize: int, world: int) -> int:
        """Elements of S, rounded down to whole pieces for the split collectives."""
        count = size_bytes // itemsize
        return count // world * world if self.split else count

    def buffer_bytes(self, size_bytes: int, world: int) -> float:
        """Bytes one rank allocates for a message of ``size_bytes``."""
        if self.name == "all_to_all":
            return 2.0 * size_bytes  # send and receive buffers of S each
        return size_bytes * (1 + 1 / world) if self.split else float(size_bytes)

    def buffers(
        self, count: int, world: int, rank: int, dtype: torch.dtype, device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(input, output) filled for the correctness check; one tensor when in place."""
        piece = count // world
        in_count = piece if self.name == "all_gather" else count
        out_count = piece if self.name == "reduce_scatter" else count
        inp = torch.empty(in_count, dtype=dtype, device=device)
        fill(inp, rank, self.reduces)
        if self.name in ("all_reduce", "broadcast"):
            if self.name == "broadcast" and rank != ROOT:
                inp.zero_()  # what it receives must come from the root
            return inp, inp
        return inp, torch.zeros(out_count, dtype=dtype, device=device)

    def run(self, out: torch.Tensor, inp: torch.Tensor) -> None:
        if self.name == "all_reduce":
            dist.all_reduce(inp)
        elif self.name == "broadcast":
            dist.broadcast(inp, ROOT)
        elif self.name == "all_gather":
            _newer("all_gather_single", "all_gather_into_tensor")(out, inp)
        elif self.name == "reduce_scatter":
            _newer("reduce_scatter_single", "reduce_scatter_tensor")(out, inp)
        else:
            dist.all_to_all_single(out, inp)


def fill(buf: torch.Tensor, rank: int, reduces: bool) -> None:
    """The rank's input pattern (sum_pattern for reductions, move_pattern otherwise)."""
    pattern = sum_pattern if reduces else move_pattern
    for start in range(0, buf.numel(), CHUNK):
        end = min(start + CHUNK, buf.numel())
        i = torch.arange(start, end, device=buf.device)
        buf[start:end] = pattern(i, rank).to(buf.dtype)


def _all_reduce(index: torch.Tensor, rank: int, world: int, piece: int) -> torch.Tensor:
    return summed(index, world)


def _reduce_scatter(index: torch.Tensor, rank: int, world: int, piece: int) -> torch.Tensor:
    return summed(rank * piece + index, world)  # this rank's piece of the sum


def _all_gather(index: torch.Tensor, rank: int, world: int, piece: int) -> torch.Tensor:
    return move_pattern(index % piece, index // piece).double()  # piece k from rank k


def _broadcast(index: torch.Tensor, rank: int, world: int, piece: int) -> torch.Tensor:
    return move_pattern(index, ROOT).double()


def _all_to_all(index: torch.Tensor, rank: int, world: int, piece: int) -> torch.Tensor:
    # piece s of the output is piece `rank` of rank s's input
    return move_pattern(rank * piece + index % piece, index // piece).double()


COLLECTIVES: dict[str, Collective] = {
    c.name: c
    for c in (
        Collective("all_reduce", lambda n: 2 * (n - 1) / n, False, True, _all_reduce),
        Collective("all_gather", lambda n: (n - 1) / n, True, False, _all_gather),
        Collective("reduce_scatter", lambda n: (n - 1) / n, True, True, _reduce_scatter),
        Collective("broadcast", lambda n: 1.0, False, False, _broadcast),
        Collective("all_to_all", lambda n: (n - 1) / n, True, False, _all_to_all),
    )
}


def count_wrong(
    collective: Collective,
    result: torch.Tensor,
    rank: int,
    world: int,
    piece: int,
    rtol: float,
) -> int:
    """How many elements of ``rank``'s output differ from what the collective must give.

    ``rtol`` applies to sums (rounding of partial sums); moved data must arrive bit for bit.
    """
    rtol = rtol if collective.reduces else 0.0
    wrong = 0
    for start in range(0, result.numel(), CHUNK):
        end = min(start + CHUNK, result.numel())
        index = torch.arange(start, end, device=result.device)
        want = collective.expected(index, rank, world, piece)
        got = result[start:end].to(torch.float64)
        wrong += int((~torch.isclose(got, want, rtol=rtol, atol=0.0)).sum())
    return wrong
