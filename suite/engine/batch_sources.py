"""Where each step's batches come from: tensors in memory, or DataLoaders over Datasets.

Both forms deal samples the same way, torch's ``DistributedSampler`` (a shuffle per epoch from
``seed + epoch``, ``drop_last`` so that every rank takes the same number of steps) batched by
``BatchSampler``: rank r of N takes positions r, r + N, ... of the epoch's permutation. So the
union of the N ranks' batches of a step is one contiguous block of the permutation, and N
workers x batch b see exactly what one process x batch N*b sees. Simulated workers draw that
global batch and deal it round-robin (``batch_tree.strided``), as the ranks would.

* ``TensorBatches`` (``Data``): the tensors are on the device once; a batch is an index tensor
  and the step gathers its samples (nothing to wait for).
* ``LoaderBatches`` (``Datasets``): a DataLoader per rank with the ``data.loader_*`` settings,
  its workers forked from the rank (they start in milliseconds); each batch is moved to the
  device. Iterable datasets are dealt item by item over ranks and loader workers. A train
  Dataset with a ``set_epoch(epoch)`` method is told each epoch as it starts (for augmentation
  seeded per epoch and sample).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import fields, replace
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.data import (
    DataLoader,
    Dataset,
    DistributedSampler,
    IterableDataset,
    get_worker_info,
)
from torch.utils.data import default_collate as torch_collate

from dpsuite.workloads import batch_tree
from dpsuite.workloads.base import Data, Datasets, Workload, sized

LossOf = Callable[[nn.Module, Any], Tensor]


class DataProblem(RuntimeError):
    """The workload's data failed while training: a sample, a batch or a loader worker."""


class BatchSource(ABC):
    """A run's data as the replicas and the evaluation take it."""

    num_train: int
    num_eval: int | None  # None: an iterable eval split that does not say
    eval_split: str
    form: str  # how the workload gave its data: tensors or datasets

    @abstractmethod
    def rank_steps(self, world: int, rank: int, per_worker: int, seed: int) -> Iterator[Any]:
        """(epoch, this rank's batch) for every step, epoch after epoch, without end."""

    @abstractmethod
    def simulated_steps(self, workers: int, per_worker: int, seed: int) -> Iterator[Any]:
        """(epoch, [each virtual worker's batch]) for every step, without end."""

    @abstractmethod
    def loss_of(self, net: nn.Module, batch: Any) -> Tensor:
        """The mean training loss of a batch (as ``rank_steps`` gave it) through ``net``."""

    @abstractmethod
    def eval_batches(self, split: str, rank: int, world: int, chunk: int) -> Iterator[Any]:
        """This rank's share of the eval or test split (every world-th sample), in batches of
        ``chunk``, as the workload's ``batch_metrics`` takes them."""

    @abstractmethod
    def sample_batch(self, n: int) -> Any:
        """A batch of the first ``n`` training samples (for counting FLOPs)."""

    def start_eval_workers(self, rank: int, world: int, chunk: int) -> None:  # noqa: B027
        """Start what evaluating will need in processes of its own, before training starts
        (nothing for data already in memory)."""

    @abstractmethod
    def channels_last(self) -> None:
        """Images (4-D tensors) in channels-last memory format from now on."""


def index_batches(num: int, world: int, rank: int, batch: int, seed: int, epoch: int) -> Tensor:
    """One epoch of a rank's index batches as a (steps, batch) tensor: DistributedSampler and
    BatchSampler with drop_last.

    The sampler's own shuffle (``randperm`` from ``seed + epoch``) and its rank's share, taken
    as tensor slices: iterating the sampler goes through a Python list of every index, which
    costs microseconds per training step on small steps (a test checks the batches are the
    sampler's)."""
    sampler = DistributedSampler(
        range(num), num_replicas=world, rank=rank, shuffle=True, seed=seed, drop_last=True
    )
    generator = torch.Generator()
    generator.manual_seed(seed + epoch)
    shuffled = torch.randperm(num, generator=generator)
    mine = shuffled[: sampler.total_size][rank : sampler.total_size : world]
    steps = sampler.num_samples // batch
    return mine[: steps * batch].reshape(steps, batch)


def worker_index_batches(
    num: int, workers: int, per_worker: int, seed: int, epoch: int
) -> list[list[Tensor]]:
    """One epoch of simulated workers' index batches: per step, each worker's (what rank r of
    ``workers`` DDP ranks takes: the global batch dealt round-robin)."""
    steps = index_batches(num, 1, 0, workers * per_worker, seed, epoch).unbind(0)
    return [[batch_tree.strided(idx, r, workers) for r in range(workers)] for idx in steps]


def _epochs(one_epoch: Callable[[int], Any]) -> Iterator[tuple[int, Any]]:
    epoch = 0
    while True:
        for batch in one_epoch(epoch):
            yield epoch, batch
        epoch += 1


class TensorBatches(BatchSource):
    """In-memory tensors on the device; a batch is an index tensor."""

    def __init__(self, data: Data, workload: Workload) -> None:
        self.data, self.workload = data, workload
        self.num_train, self.num_eval, self.eval_split = (
            data.num_train,
            data.num_eval,
            data.eval_split,
        )
        self.form = "tensors"

    def channels_last(self) -> None:
        images = {
            f.name: t.contiguous(memory_format=torch.channels_last)
            for f in fields(self.data)
            if isinstance(t := getattr(self.data, f.name), Tensor) and t.dim() == 4
        }
        self.data = replace(self.data, **images)

    def rank_steps(self, world: int, rank: int, per_worker: int, seed: int) -> Iterator[Any]:
        n = self.num_train
        return _epochs(lambda e: index_batches(n, world, rank, per_worker, seed, e).unbind(0))

    def simulated_steps(self, workers: int, per_worker: int, seed: int) -> Iterator[Any]:
        n = self.num_train
        return _epochs(lambda e: worker_index_batches(n, workers, per_worker, seed, e))

    def loss_of(self, net: nn.Module, idx: Tensor) -> Tensor:
        return self.workload.batch_loss(net, (self.data.train_x[idx], self.data.train_y[idx]))

    def eval_batches(self, split: str, rank: int, world: int, chunk: int) -> Iterator[Any]:
        x, y = self.split_tensors(split)
        idx = torch.arange(rank, x.shape[0], world, device=x.device)
        return ((x[part], y[part]) for part in idx.split(chunk))

    def split_tensors(self, split: str) -> tuple[Tensor, Tensor]:
        d = self.data
        if split == "test" and d.test_x is not None and d.test_y is not None:
            return d.test_x, d.test_y
        return d.eval_x, d.eval_y

    def sample_batch(self, n: int) -> Any:
        return torch.arange(min(n, self.num_train), device=self.data.train_x.device)


class CheckedSamples(Dataset):
    """A map-style dataset whose failing ``__getitem__`` names the split and the index."""

    def __init__(self, dataset: Dataset, split: str) -> None:
        self.dataset, self.split = dataset, split

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> Any:
        try:
            return self.dataset[index]
        except Exception as exc:  # the workload's own code: any error is a data problem
            raise DataProblem(f"{self.split} sample {index}: {type(exc).__name__}: {exc}") from exc


class DealtItems(IterableDataset):
    """An iterable dataset dealt over ranks and loader workers: item i goes to rank i mod N;
    within a rank, whole batches go round-robin to its loader workers (each worker batches
    what it is given, so a worker must get whole batches, and the loader then hands them out
    in the stream's order)."""

    def __init__(self, dataset: IterableDataset, world: int, rank: int, batch: int) -> None:
        self.dataset, self.world, self.rank, self.batch = dataset, world, rank, batch

    def __iter__(self) -> Iterator[Any]:
        info = get_worker_info()
        workers, worker = (info.num_workers, info.id) if info else (1, 0)
        for i, item in enumerate(self.dataset):
            mine = i // self.world  # the rank's own count of its items
            if i % self.world == self.rank and (mine // self.batch) % workers == worker:
                yield item


class LoaderBatches(BatchSource):
    """DataLoaders over Datasets; each batch moved to the device as it is taken."""

    def __init__(
        self,
        data: Datasets,
        workload: Workload,
        loader: Any,
        device: torch.device,
        float_dtype: torch.dtype,
        num_train: int,
    ) -> None:
        self.data, self.workload, self.cfg = data, workload, loader
        self.device, self.float_dtype = device, float_dtype
        self.num_train, self.num_eval, self.eval_split = (
            num_train,
            sized(data.eval),
            data.eval_split,
        )
        self.form = "datasets"
        self.collate = data.collate_fn or torch_collate
        self.memory_format: torch.memory_format | None = None
        self.eval_loaders: dict[tuple[int, int, int, int], DataLoader] = {}

    def channels_last(self) -> None:
        self.memory_format = torch.channels_last

    def loader(self, dataset: Dataset, split: str, batch: int, **kw: Any) -> DataLoader:
        """A DataLoader with the run's settings: workers forked from this rank (a forkserver or
        spawn would import torch again in each: seconds per worker)."""
        c = self.cfg
        workers = c.loader_workers
        if isinstance(dataset, IterableDataset):
            kw.pop("sampler", None)
        else:
            dataset = CheckedSamples(dataset, split)
        return DataLoader(
            dataset,
            batch_size=batch,
            collate_fn=self.collate,
            num_workers=workers,
            pin_memory=c.pin_memory and self.device.type == "cuda",
            persistent_workers=c.persistent_workers and workers > 0,
            prefetch_factor=c.prefetch_factor if workers > 0 else None,
            timeout=c.timeout_s if workers > 0 else 0,
            multiprocessing_context="fork" if workers > 0 else None,
            **kw,
        )

    def rank_steps(self, world: int, rank: int, per_worker: int, seed: int) -> Iterator[Any]:
        steps = (self.num_train // world) // per_worker  # what every rank takes per epoch
        return self._steps(self.data.train, world, rank, per_worker, seed, steps)

    def simulated_steps(self, workers: int, per_worker: int, seed: int) -> Iterator[Any]:
        steps = self.num_train // (workers * per_worker)
        whole = self._steps(self.data.train, 1, 0, workers * per_worker, seed, steps)
        for epoch, batch in whole:
            yield epoch, [batch_tree.strided(batch, r, workers) for r in range(workers)]

    def _steps(
        self, train: Dataset, world: int, rank: int, batch: int, seed: int, steps: int
    ) -> Iterator[tuple[int, Any]]:
        if isinstance(train, IterableDataset):
            dealt = DealtItems(train, world, rank, batch)
            loader = self.loader(dealt, "train", batch, drop_last=True)
            sampler = None
        else:
            sampler = DistributedSampler(
                train, num_replicas=world, rank=rank, shuffle=True, seed=seed, drop_last=True
            )
            loader = self.loader(train, "train", batch, sampler=sampler, drop_last=True)
        epoch = 0
        while True:
            if sampler is not None:
                sampler.set_epoch(epoch)
            if hasattr(train, "set_epoch"):  # e.g. augmentation seeded per (epoch, sample)
                train.set_epoch(epoch)  # type: ignore[attr-defined]
            taken = 0
            for batch_ in self._moved(loader, "train"):
                yield epoch, batch_
                taken += 1
                if taken == steps:
                    break
            if taken < steps:
                raise DataProblem(
                    f"the train split gave {taken} batches in epoch {epoch}, "
                    f"where {steps} were expected (num_train() says {self.num_train} samples)"
                )
            epoch += 1

    def _moved(self, loader: DataLoader, split: str) -> Iterator[Any]:
        """The loader's batches, checked and on the device; a loader failure in one line."""
        it = iter(loader)
        checked = False
        while True:
            try:
                batch = next(it)
            except StopIteration:
                return
            except DataProblem:
                raise
            except Exception as exc:  # a loader worker killed, a timeout, a sample's error
                raise DataProblem(f"{split} data: {one_line(exc)}{hint(exc)}") from None
            if not checked:
                problem = batch_tree.problem(batch)
                if problem:
                    raise DataProblem(f"{split} data: {problem}")
                checked = True
            yield self.on_device(batch)

    def loss_of(self, net: nn.Module, batch: Any) -> Tensor:
        return self.workload.batch_loss(net, batch)

    def eval_batches(self, split: str, rank: int, world: int, chunk: int) -> Iterator[Any]:
        return self._moved(self.eval_loader(split, rank, world, chunk), split)

    def eval_loader(self, split: str, rank: int, world: int, chunk: int) -> DataLoader:
        """The split's loader, one for the whole run: its persistent workers serve every
        evaluation (a loader per evaluation would fork new workers each time)."""
        dataset = (
            self.data.test if split == "test" and self.data.test is not None else self.data.eval
        )
        key = (id(dataset), rank, world, chunk)  # a test split that is the eval split: one
        if key not in self.eval_loaders:
            if isinstance(dataset, IterableDataset):
                loader = self.loader(DealtItems(dataset, world, rank, chunk), split, chunk)
            else:
                mine = list(range(rank, sized(dataset) or 0, world))
                loader = self.loader(dataset, split, chunk, sampler=mine)
            self.eval_loaders[key] = loader
        return self.eval_loaders[key]

    def start_eval_workers(self, rank: int, world: int, chunk: int) -> None:
        """Fork the eval and test splits' persistent loader workers now, before any gradient
        all-reduce, instead of at the first evaluation.

        In a DDP process, each all-reduce a backward pass issues ends on gloo's thread by
        making and dropping a Python thread state; a fork at that moment leaves a child
        deadlocked for good on CPython releases without the fix of gh-112275 (3.11.7
        among them): a loader worker that never starts, holding the run's output open.
        Forked here, no all-reduce has run yet. (With ``persistent_workers`` off, every
        iteration forks anew and this does not apply.)"""
        if not (self.cfg.persistent_workers and self.cfg.loader_workers > 0):
            return
        # A split that is another's (no test split, or the eval split again) shares its loader:
        # each loader is started once.
        loaders = (self.eval_loader(split, rank, world, chunk) for split in ("eval", "test"))
        for loader in dict.fromkeys(loaders):
            iter(loader)

    def sample_batch(self, n: int) -> Any:
        train = self.data.train
        if isinstance(train, IterableDataset):
            items = [item for _, item in zip(range(n), train, strict=False)]
        else:
            items = [CheckedSamples(train, "train")[i] for i in range(min(n, self.num_train))]
        return self.on_device(self.collate(items))

    def on_device(self, batch: Any) -> Any:
        return batch_tree.to_device(batch, self.device, self.float_dtype, self.memory_format)


def hint(exc: BaseException) -> str:
    """What the user can do about a loader's own errors."""
    text = str(exc)
    if "DataLoader timed out" in text:
        return " (data.timeout_s: the seconds a loader worker may take for one batch)"
    if "exited unexpectedly" in text:
        return " (killed? a loader worker that runs out of memory is ended by the system)"
    return ""


def one_line(exc: BaseException) -> str:
    """An exception in one line; for one re-raised from a loader worker, the original error
    (the last line of the traceback the worker sent), not the wrapper's first."""
    text = str(exc).strip()
    if "Original Traceback" in text:
        last = text.splitlines()[-1]
        name, _, message = last.partition(": ")
        short = name.rsplit(".", 1)[-1]
        return message if short == DataProblem.__name__ else f"{short}: {message}"
    first = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {first}"[:500]


def batch_source(
    data: Data | Datasets,
    workload: Workload,
    loader_cfg: Any,
    device: torch.device,
    float_dtype: torch.dtype,
) -> BatchSource:
    if isinstance(data, Data):
        return TensorBatches(data, workload)
    num_train = sized(data.train)
    if num_train is None:  # an iterable that does not say: the workload does
        num_train = workload.num_train()
    return LoaderBatches(data, workload, loader_cfg, device, float_dtype, num_train)


def steps_per_epoch(num_samples: int, global_batch: int) -> int:
    return num_samples // global_batch
