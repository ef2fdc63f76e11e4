"""The training loop's steady-state step issues what a bare DDP step issues, and nothing more.

In a 2-worker gloo run, the Python-level collectives (``torch.distributed.*``) and the
tensor-to-host reads (``.item()``, ``.tolist()``, ``.cpu()``, ``.numpy()``, ``float(t)``,
``int(t)``, ``bool(t)``) are counted per step: of the bare loop of the overhead bench
(tests/bench/interleaved.py) and of the suite's own loop (``dpsuite.engine.train.loop_step``),
in the same processes, over whole periods of the probes' periodic work. On a GPU each of
these drains the device's queue or makes the ranks meet; on every step outside the loop's
evaluations (where the ranks meet on purpose) the suite must issue exactly the bare step's.
The loss check, every ``train.check_every`` steps, may read one value identical on every
rank (the divergence flag) and make no collective.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

from dpsuite.conf.compose import compose_config
from dpsuite.conf.run_spec import RunSpec, resolve
from dpsuite.engine.train import calibrate, setup
from dpsuite.runtime import distributed as dd
from dpsuite.runtime.distributed import Ranks
from tests.bench.interleaved import BareLoop, SuiteLoop, periods

COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_object",
    "broadcast",
    "broadcast_object_list",
    "barrier",
    "monitored_barrier",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "all_to_all",
    "all_to_all_single",
    "gather",
    "scatter",
    "send",
    "recv",
    "isend",
    "irecv",
)
HOST_READS = ("item", "tolist", "cpu", "numpy", "__float__", "__int__", "__bool__")
WARMUP = 12  # past the step timer's warm-up and DDP's first iterations


@contextmanager
def counting() -> Iterator[Counter]:
    """Count calls of the collectives and host reads while inside."""
    counts: Counter = Counter()
    saved: list[tuple[Any, str, Any]] = []

    def wrap(owner: Any, name: str, kind: str) -> None:
        original = getattr(owner, name, None)
        if original is None:
            return

        def counted(*args: Any, **kwargs: Any) -> Any:
            counts[f"{kind}.{name}"] += 1
            return original(*args, **kwargs)

        saved.append((owner, name, original))
        setattr(owner, name, counted)

    for name in COLLECTIVES:
        wrap(dist, name, "dist")
    for name in HOST_READS:
        wrap(torch.Tensor, name, "host")
    try:
        yield counts
    finally:
        for owner, name, original in reversed(saved):
            setattr(owner, name, original)


def per_step(take_step: Callable[[], None], steps: int) -> list[dict[str, int]]:
    """Each step's counts."""
    rows = []
    with counting() as counts:
        for _ in range(steps):
            before = Counter(counts)
            take_step()
            rows.append(dict(counts - before))
    return rows


def rank_main(local_rank: int, init_method: str, spec: RunSpec, out: Path) -> None:
    ranks = Ranks(local_rank, spec.workers, local_rank, spec.workers)
    device = dd.device_for(spec.device, local_rank, spec.workers)
    dd.init_group(spec.backend, ranks, init_method, spec.cfg.ddp.timeout_s, device)
    run = setup(spec, ranks, device, writer=None)
    calibrate(run)
    bare, suite = BareLoop(run), SuiteLoop(run)
    bare.steps(WARMUP)
    suite.steps(WARMUP)
    steps = math.lcm(*periods(run))
    first = suite.step
    result = {
        "bare": per_step(lambda: bare.steps(1), steps),
        "suite": per_step(lambda: suite.steps(1), steps),
        "first_step": first,
        "check_every": spec.cfg.train.check_every,
        "evals": sorted(s for s in run.evals if first < s <= first + 2 * steps + 1),
    }
    # The same loop with one more host read per step: what the comparison must catch.
    add = run.losses.add

    def add_and_read(loss: torch.Tensor) -> None:
        loss.item()
        add(loss)

    run.losses.add = add_and_read  # type: ignore[method-assign]
    result["suite_plus_item"] = per_step(lambda: suite.steps(1), steps)
    if ranks.rank == 0:
        out.write_text(json.dumps(result))
    del run
    dd.shutdown()


def extras(bare: list[dict[str, int]], suite: list[dict[str, int]], result: dict, first: int):
    """What the suite's steps issue beyond the bare step's, one line per step that does."""
    (usual,) = {json.dumps(c, sort_keys=True) for c in bare}  # every bare step alike
    expected = json.loads(usual)
    found = []
    for i, counts in enumerate(suite):
        done = first + i + 1
        if done in result["evals"]:
            continue  # an evaluation step: the ranks meet on purpose
        if done % result["check_every"] == 0:  # the loss check: no collective, one flag read
            same = (
                of_kind(counts, "dist.") == of_kind(expected, "dist.")
                and sum(of_kind(counts, "host.").values())
                <= sum(of_kind(expected, "host.").values()) + 1
            )
        else:
            same = counts == expected
        if not same:
            found.append(f"step {done}: suite {counts}, bare {expected}")
    return found


def of_kind(counts: dict[str, int], prefix: str) -> dict[str, int]:
    return {k: v for k, v in counts.items() if k.startswith(prefix)}


@pytest.fixture(scope="module")
def counted(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("counts")
    overrides = [
        "workload=mnist1d_mlp",
        "workload.num_samples=4000",
        "batch.per_worker=8",
        "workers=2",
        "threads_per_worker=1",
        "train.epochs=1000",
        "train.eval_at_start=false",
        "lr_rule.warmup_epochs=0",
        f"results_dir={tmp / 'runs'}",
    ]
    spec = resolve(compose_config(overrides))
    out = tmp / "counts.json"
    dd.spawn_local(rank_main, (spec, out), 2, 1, spec.cfg.ddp.start_method, scratch=tmp)
    return json.loads(out.read_text())


@pytest.mark.multiproc
def test_steady_state_step_issues_what_a_bare_step_issues(counted):
    found = extras(counted["bare"], counted["suite"], counted, counted["first_step"])
    assert not found, "\n".join(found)


@pytest.mark.multiproc
def test_one_more_item_per_step_is_caught(counted):
    steps = len(counted["suite_plus_item"])
    first = counted["first_step"] + steps
    found = extras(counted["bare"], counted["suite_plus_item"], counted, first)
    evals = [s for s in counted["evals"] if first < s <= first + steps]
    assert len(found) == steps - len(evals), "\n".join(found)
