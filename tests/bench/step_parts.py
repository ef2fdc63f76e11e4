"""Where the suite's training step spends its time beyond a bare DDP step, part by part.

    python tests/bench/step_parts.py [--per-worker 32] [--steps 3000] [--blocks 10] [OVERRIDE ...]

Two gloo ranks set the run up as ``dpsuite run`` does (mnist1d_mlp unless overridden), then
take ``--steps`` of the training loop's steps with the clock read between its parts (the parts
of ``dpsuite.engine.train.train_step`` and ``check``, in their order; each probe's hook timed on
its own) and as many bare DDP steps (``tests/bench/interleaved.BareLoop``), in ``--blocks``
alternating blocks of each, so that a drift of the machine's speed falls on both alike. Prints
µs per step of each part on each rank, the periodic parts averaged over all steps, with the
clock calls around each part included. For the suite-vs-bare ratio use ``overhead.py``: this
says where the difference goes, not how large it is.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # run as a script: the suite and tests.bench from this checkout

WORKERS = 2
BASE = ["workload=mnist1d_mlp", "workload.num_samples=25000", f"workers={WORKERS}"]
BASE += ["threads_per_worker=1", "train.epochs=100000", "train.eval_at_start=false"]
BASE += ["lr_rule.warmup_epochs=0"]


class Parts:
    """Nanoseconds by part, read as the clock passes each point."""

    def __init__(self) -> None:
        self.ns: dict[str, int] = defaultdict(int)
        self.last = time.perf_counter_ns()

    def mark(self, part: str) -> None:
        now = time.perf_counter_ns()
        self.ns[part] += now - self.last
        self.last = now

    def call_each(self, prefix: str, calls: list, *args) -> None:
        for call in calls:
            call(*args)
            self.mark(f"{prefix}: {type(call.__self__).__name__}")


def suite_steps(run, first: int, steps: int, parts: Parts) -> int:
    """The loop's steps from step ``first`` on (``train_step``, then ``check`` when due), timed
    part by part; returns the next step (the loop's steps only ever go forward)."""
    from dpsuite.engine import train

    batches = run.replicas.batches()
    every = run.spec.cfg.train.check_every
    parts.mark("(start)")
    for step in range(first, first + steps):
        lr = run.plan.lr_at(step)
        for group in run.optimizer.param_groups:
            group["lr"] = lr
        parts.mark("LR")
        if step >= run.probes._wake:
            run.probes._plan(step)  # the calls of the probes due at this step
            parts.mark("probes due chosen")
        parts.call_each("step start", run.probes._start, step)
        _, batch = next(batches)
        parts.mark("next batch")
        parts.call_each("batch ready", run.probes._batch_ready, step)
        run.optimizer.zero_grad(set_to_none=True)
        loss = run.replicas.forward_backward(batch)
        parts.mark("zero_grad, forward, backward")
        parts.call_each("backward end", run.probes._backward, step)
        run.precision.step(run.optimizer)
        run.replicas.after_step()
        parts.mark("optimizer step")
        parts.call_each("step end", run.probes._end, step)
        run.losses.add(loss)
        if (step + 1) % every == 0:
            train.check(run, step + 1)
        parts.mark("loss kept, check")
    return first + steps


def bare_steps(bare, steps: int, parts: Parts) -> None:
    net, opt = bare.net, bare.optimizer
    parts.mark("(start)")
    for _ in range(steps):
        lr = bare.plan.lr_at(bare.step)
        for group in opt.param_groups:
            group["lr"] = lr
        parts.mark("bare: LR")
        batch = next(bare.batches)
        parts.mark("bare: next batch")
        opt.zero_grad(set_to_none=True)
        bare.workload.batch_loss(net, batch).backward()
        parts.mark("bare: zero_grad, forward, backward")
        opt.step()
        bare.step += 1
        parts.mark("bare: optimizer step")


def rank_main(local_rank: int, init_method: str, spec, steps: int, blocks: int, out: Path) -> None:
    import torch.distributed as dist

    from dpsuite.engine.train import calibrate, setup
    from dpsuite.runtime import distributed as dd
    from dpsuite.runtime.distributed import Ranks
    from tests.bench.interleaved import BareLoop

    ranks = Ranks(local_rank, spec.workers, local_rank, spec.workers)
    device = dd.device_for(spec.device, local_rank, spec.workers)
    dd.init_group(spec.backend, ranks, init_method, spec.cfg.ddp.timeout_s, device)
    run = setup(spec, ranks, device, writer=None)
    calibrate(run)
    bare = BareLoop(run)
    step = suite_steps(run, 0, 50, Parts())  # warm-up of both
    bare_steps(bare, 50, Parts())
    parts = Parts()
    per_block = max(1, steps // max(1, blocks))
    for _ in range(blocks):  # alternating, so that a drift of the machine falls on both alike
        dist.barrier()
        step = suite_steps(run, step, per_block, parts)
        dist.barrier()
        bare_steps(bare, per_block, parts)
    steps = per_block * blocks
    per_step = {k: v / steps / 1e3 for k, v in parts.ns.items() if k != "(start)"}
    out.with_suffix(f".{local_rank}").write_text(json.dumps(per_step))
    del run
    dd.shutdown()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--per-worker", type=int, default=32)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--blocks", type=int, default=10, help="alternations of suite and bare")
    p.add_argument("overrides", nargs="*", help="more `dpsuite run` overrides")
    args = p.parse_args()

    from dpsuite.conf.compose import compose_config
    from dpsuite.conf.run_spec import resolve
    from dpsuite.engine import data_memo
    from dpsuite.runtime import distributed as dd

    overrides = [*BASE, f"batch.per_worker={args.per_worker}", *args.overrides]
    spec = resolve(compose_config(overrides))
    data_memo.load_data(spec.build_workload())
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "parts"
        dd.spawn_local(
            rank_main,
            (spec, args.steps, args.blocks, out),
            spec.workers,
            spec.threads_per_worker,
            spec.cfg.ddp.start_method,
            scratch=Path(tmp),
        )
        ranks = [json.loads(out.with_suffix(f".{r}").read_text()) for r in range(WORKERS)]
    print(f"µs per step over {args.steps} steps, rank 0 / rank 1 ({' '.join(overrides)})")
    suite = sum(v for k, v in ranks[0].items() if not k.startswith("bare"))
    bare = sum(v for k, v in ranks[0].items() if k.startswith("bare"))
    for part in ranks[0]:
        print(f"  {part:44s} {ranks[0][part]:9.1f} {ranks[1][part]:9.1f}")
    print(f"  {'suite step, all parts (rank 0)':44s} {suite:9.1f}")
    print(f"  {'bare step, all parts (rank 0)':44s} {bare:9.1f}")


if __name__ == "__main__":
    main()
