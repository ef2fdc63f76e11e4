"""A sweep: the runs of one Hydra multirun, with a manifest, resume and a summary.

``dpsuite sweep NAME [overrides...]`` is ``dpsuite run -m +sweep=NAME [overrides...]``: the preset
``suite/conf/sweep/NAME.yaml`` sets values and a grid (``hydra.sweeper.params``), Hydra's sweeper
and launcher run the jobs. Around that, this module

* checks every point before any work starts (``suite.conf.compose``);
* writes ``RESULTS_DIR/sweep.json`` (atomically): preset, overrides, run ids, start and end,
  the status of every run and counts by status, updated as runs finish;
* resumes for free: run ids are stable, complete runs are skipped by ``suite.engine.launch`` and
  everything else (failed, killed half-way, never started) runs again;
* prints one summary line at the end: complete / diverged / failed / skipped;
* holds the lock of every results directory it writes (``suite.results.lock``), so that a
  second sweep on the same directory is refused instead of racing this one.

A preset with ``parts`` (``demo``) runs other presets in turn, into ``RESULTS_DIR/<part>/``.
"""

from __future__ import annotations

import os
import shlex
import socket
from collections import Counter
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from suite import progress
from suite.conf import compose as preflight
from suite.engine.distributed import ranks_from_env
from suite.errors import ResultsWriteError, UserError
from suite.results import lock as results_lock
from suite.results import now_iso, read_status, write_json_atomic
from suite.sweep import hydra_app

MANIFEST = "sweep.json"
MANIFEST_SCHEMA = 1
PRESET_GROUP = "sweep"
# Final statuses in the order the summary lists them.
SUMMARY_ORDER = ("complete", "diverged", "failed", "skipped", "not run")


def preset_names() -> list[str]:
    files = resources.files(preflight.CONFIG_MODULE).joinpath(PRESET_GROUP).iterdir()
    return sorted(f.name[:-5] for f in files if f.name.endswith(".yaml"))


def preset_parts(name: str) -> dict[str, str] | None:
    """The presets a composite preset runs in turn ({subdirectory: preset}), or None."""
    if name not in preset_names():
        raise UserError(f"unknown sweep '{name}' (choose from: {', '.join(preset_names())})")
    file = resources.files(preflight.CONFIG_MODULE).joinpath(PRESET_GROUP, f"{name}.yaml")
    raw = OmegaConf.create(file.read_text())
    parts = raw.get("parts")
    return {str(k): str(v) for k, v in parts.items()} if parts else None


def _results_dir_override(overrides: list[str]) -> str | None:
    for o in overrides:
        key, _, value = o.partition("=")
        if key.lstrip("+") == "results_dir":
            return value
    return None


@dataclass
class Sweep:
    """One multirun: what it will run (checked), and where its manifest goes."""

    preset: str | None
    overrides: list[str]
    plan: preflight.Plan
    runs: dict[str, str] = field(default_factory=dict)  # run_id -> status in this sweep
    run_dirs: dict[str, Path] = field(default_factory=dict)
    started_at: str = ""

    @property
    def hydra_args(self) -> list[str]:
        preset = [f"+{PRESET_GROUP}={self.preset}"] if self.preset else []
        return ["--multirun", *preset, *self.overrides]

    @property
    def label(self) -> str:
        return self.preset or "multirun"

    @property
    def results_dirs(self) -> list[Path]:
        return sorted({p.parent for p in self.run_dirs.values()})

    @classmethod
    def checked(cls, preset: str | None, overrides: list[str]) -> Sweep:
        """Compose and validate every point (UserError on bad input), before any work."""
        preset_arg = [f"+{PRESET_GROUP}={preset}"] if preset else []
        plan = preflight.plan([*preset_arg, *overrides], multirun=True)
        sweep = cls(preset, list(overrides), plan)
        for spec in plan.specs:  # a run id twice (two spellings of one config) runs once
            sweep.run_dirs.setdefault(spec.run_id, spec.run_dir)
        return sweep

    # ---- manifest -------------------------------------------------------------------------
    def mark_existing(self) -> int:
        """Record which runs are complete already (they will be skipped); returns how many."""
        from suite.engine.launch import reusable

        for spec in self.plan.specs:
            # Jobs on other machines decide there; this machine's fingerprint is no guide.
            done = not self.plan.launcher.remote and reusable(spec)
            self.runs[spec.run_id] = "skipped" if done else "pending"
        return sum(s == "skipped" for s in self.runs.values())

    def record(self, run_id: str, status: str) -> None:
        """A job of this process finished (a hydra_app listener)."""
        if run_id in self.runs:
            self.runs[run_id] = status
            self.write_manifest("running")

    def settle(self) -> None:
        """Final statuses from the runs' own files (jobs may have run in other processes)."""
        for run_id, status in self.runs.items():
            if status == "skipped":
                continue
            on_disk = read_status(self.run_dirs[run_id])
            if on_disk is None:
                self.runs[run_id] = "not run"
            elif on_disk == "running":  # the sweep is over: nothing of it is still running
                self.runs[run_id] = "failed"
            else:
                self.runs[run_id] = on_disk

    def counts(self) -> dict[str, int]:
        """Runs by final status, in summary order."""
        c = Counter("not run" if s == "pending" else s for s in self.runs.values())
        return {k: c[k] for k in sorted(c, key=_summary_rank)}

    def write_manifest(self, state: str) -> None:
        for results_dir in self.results_dirs:
            ids = [i for i, d in self.run_dirs.items() if d.parent == results_dir]
            runs = {i: self.runs.get(i, "pending") for i in ids}
            manifest: dict[str, Any] = {
                "schema_version": MANIFEST_SCHEMA,
                "preset": self.preset,
                "overrides": self.overrides,
                "grid": self.plan.grid,
                "launcher": self.plan.launcher.target,
                "state": state,  # running | finished | interrupted
                "started_at": self.started_at,
                "finished_at": now_iso() if state != "running" else None,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "run_ids": ids,
                "counts": dict(Counter(runs.values())),
                "runs": runs,
            }
            write_json_atomic(results_dir / MANIFEST, manifest)

    def summary_line(self, state: str) -> str:
        counts = self.counts()
        parts = [f"{n} {status}" for status, n in counts.items()]
        where = ", ".join(str(d) for d in self.results_dirs)
        return f"sweep {self.label} {state}: {len(self.runs)} runs: {', '.join(parts)} ({where})"

    # ---- running --------------------------------------------------------------------------
    def run(self) -> int:
        """Run the multirun; returns the exit code (1 when a run failed or did not run)."""
        ranks = ranks_from_env()
        leader = ranks is None or ranks.rank == 0  # under torchrun every rank runs the sweep
        self.started_at = now_iso()
        done = self.mark_existing()
        if leader:
            self.write_manifest("running")
            progress.current().sweep_started(self.label, len(self.runs), done)
            hydra_app.RUN_LISTENERS.append(self.record)
        state = "interrupted"
        try:
            hydra_app.run_hydra(self.hydra_args)
            state = "finished"
        finally:
            if leader:
                hydra_app.RUN_LISTENERS.remove(self.record)
                self.settle()
                try:
                    self.write_manifest(state)
                except ResultsWriteError:
                    if state == "finished":
                        raise  # otherwise the error that stops the sweep is the one to report
                print(self.summary_line(state), flush=True)
        bad = {"failed", "not run"} & set(self.runs.values())
        return 1 if bad else 0


def _summary_rank(status: str) -> int:
    return SUMMARY_ORDER.index(status) if status in SUMMARY_ORDER else len(SUMMARY_ORDER)


def run_sweep(preset: str | None, overrides: list[str]) -> int:
    """`dpsuite sweep NAME ...` (and `dpsuite run -m ...` with ``preset=None``)."""
    parts = preset_parts(preset) if preset else None
    command = shlex.join(["dpsuite", *(["sweep", preset] if preset else ["run", "-m"]), *overrides])
    if parts is None:
        sweep = Sweep.checked(preset, overrides)
        lock = results_lock.for_launcher(sweep.results_dirs, command)
        with lock, progress.activated(progress.for_terminal()):
            return sweep.run()
    assert preset is not None
    root = composite_results_dir(preset, overrides)
    rest = [o for o in overrides if _results_dir_override([o]) is None]
    # Check every part before the first one starts.
    sweeps = [
        Sweep.checked(part, [*rest, f"results_dir={Path(root) / subdir}"])
        for subdir, part in parts.items()
    ]
    code = 0
    dirs = [d for sweep in sweeps for d in sweep.results_dirs]
    with results_lock.for_launcher(dirs, command), progress.activated(progress.for_terminal()):
        for sweep in sweeps:
            code = max(code, sweep.run())
    return code


def composite_results_dir(preset: str, overrides: list[str]) -> str:
    """Where a composite preset's parts go: ``results_dir=`` if given, else the preset's."""
    given = _results_dir_override(overrides)
    if given:
        return given
    file = resources.files(preflight.CONFIG_MODULE).joinpath(PRESET_GROUP, f"{preset}.yaml")
    return str(OmegaConf.create(file.read_text()).get("results_dir", f"results/{preset}"))
