"""Benchmark: the `convergence` preset (one seed) against the same training as a bare loop.

`nox -s bench` (or `pytest tests/bench --benchmark-enable`). The requirement is a ratio of at
most 1.3; it is reported (benchmark extra_info and stdout), not asserted: timings depend on the
machine and on what else runs on it.
"""

from dpsuite.conf.compose import plan
from tests.bench import bare_convergence as bare


def test_bare_loop_trains_what_the_preset_trains(monkeypatch, tmp_path):
    """Not a benchmark: the yardstick must keep matching the preset."""
    monkeypatch.chdir(tmp_path)  # checking the preset creates its (relative) results directory
    specs = plan(["+sweep=convergence_budget", "seed=0"], multirun=True).specs
    assert sorted({s.global_batch for s in specs}) == bare.BATCHES
    assert sorted({s.cfg.lr_rule.name for s in specs}) == sorted(bare.RULES)
    for s in specs:
        r, c = s.summary(), s.cfg
        assert (r["epochs"], r["base_lr"], r["base_batch"]) == (
            bare.EPOCHS,
            bare.BASE_LR,
            bare.BASE_BATCH,
        )
        assert (r["momentum"], r["weight_decay"], r["schedule"]) == (
            bare.MOMENTUM,
            bare.WEIGHT_DECAY,
            "cosine",
        )
        assert (c.workload.num_samples, c.workload.data_seed) == (bare.NUM_SAMPLES, bare.DATA_SEED)
        rule = r["lr_rule"]
        warms = rule == "linear_warmup" and s.global_batch > bare.BASE_BATCH
        assert r["warmup_epochs"] == (bare.WARMUP_EPOCHS if warms else 0)
        assert (c.mode, c.train.check_every, c.train.evals_per_epoch, c.train.eval_at_start) == (
            "simulated",
            bare.CHECK_EVERY,
            1,
            True,
        )


def test_convergence_preset_against_bare_loop(benchmark, tmp_path):
    bare.cache_file()  # generate the dataset outside both timings
    bare_wall, bare_cpu = bare.bare_time(seed=0)
    wall, cpu = benchmark.pedantic(
        bare.preset_time, args=(tmp_path / "results", 0), rounds=1, iterations=1
    )
    benchmark.extra_info.update(
        bare_loop_wall_s=bare_wall,
        preset_wall_s=wall,
        wall_ratio=wall / bare_wall,
        bare_loop_cpu_s=bare_cpu,
        preset_cpu_s=cpu,
        cpu_ratio=cpu / bare_cpu,
    )
    print(
        f"\nconvergence preset {wall:.1f} s, bare loop {bare_wall:.1f} s: ratio "
        f"{wall / bare_wall:.2f} (CPU time ratio {cpu / bare_cpu:.2f})"
    )
