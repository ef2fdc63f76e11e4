"""Process groups: join or create them, check replicas agree, and tear down cleanly."""

from __future__ import annotations

import contextlib
import faulthandler
import functools
import gc
import hashlib
import json
import multiprocessing
import os
import re
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta
from multiprocessing import connection as mp_connection
from multiprocessing import reduction
from pathlib import Path
from typing import TextIO

import torch
import torch.distributed as dist
from torch import nn

from dpsuite.errors import UserError
from dpsuite.runtime import rendezvous
from dpsuite.runtime.pipe import Pipe
from dpsuite.runtime.ranks import Ranks


def slurm_master_env() -> None:
    """Under submitit or srun, point the env:// rendezvous at the first node unless already
    set; across nodes, at its address and over the interface that reaches it."""
    master_from_user = "MASTER_ADDR" in os.environ
    _slurm_master_defaults()
    try:
        rendezvous.prepare(os.environ, master_is_node_name=not master_from_user)
    except rendezvous.Unreachable as exc:
        print(f"dpsuite: error: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(1) from None


def _slurm_master_defaults() -> None:
    env = os.environ
    if env.get("SUBMITIT_EXECUTOR") and "MASTER_ADDR" not in env:
        from submitit.helpers import TorchDistributedEnvironment

        # First node's hostname, a port derived from the job id, RANK, WORLD_SIZE, LOCAL_RANK.
        TorchDistributedEnvironment().export(set_cuda_visible_devices=False, overwrite=True)
        return
    if "SLURM_PROCID" not in env or "MASTER_ADDR" in env:
        return
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST", "127.0.0.1")
    import subprocess

    try:
        first = subprocess.run(
            ["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, check=True
        ).stdout.split()[0]
    except (OSError, subprocess.CalledProcessError, IndexError):
        first = nodelist.split(",")[0]
    env["MASTER_ADDR"] = first
    env.setdefault("MASTER_PORT", str(29500 + int(env.get("SLURM_JOB_ID", "0")) % 20000))
    env["RANK"], env["WORLD_SIZE"] = env["SLURM_PROCID"], env["SLURM_NTASKS"]


def device_for(device: str, local_rank: int, local_world_size: int) -> torch.device:
    """This rank's device; a CUDA rank is bound to it (``torch.cuda.set_device``)."""
    if device == "cuda":
        index = cuda_index(local_rank, local_world_size)
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    return torch.device("cpu")


def cuda_index(local_rank: int, local_world_size: int) -> int:
    """The visible GPU this rank uses. Under ``--gpus-per-task=1``, ``--gpu-bind`` or a
    CUDA_VISIBLE_DEVICES per task, each rank sees one GPU: its device 0. When the node's ranks
    share its GPUs (as many or more than ranks), one each: the local rank's. Fewer GPUs than
    ranks has no right answer to guess."""
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if visible == 1:
        return 0
    if local_world_size <= visible and local_rank < visible:
        return local_rank
    raise UserError(
        f"local rank {local_rank} of {local_world_size} sees {visible} GPUs "
        f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')}, "
        f"SLURM_GPUS_PER_TASK={os.environ.get('SLURM_GPUS_PER_TASK', '<unset>')}): give each "
        "task one GPU (--gpus-per-task=1 or --gpu-bind) or each node one GPU per local rank"
    )


def init_group(
    backend: str,
    ranks: Ranks,
    init_method: str,
    timeout_s: float,
    device: torch.device | None = None,
) -> None:
    """Join the process group; a CUDA rank names its GPU, so NCCL binds its communicator to it
    at once instead of guessing the device at the first barrier."""
    bound = {"device_id": device} if device is not None and device.type == "cuda" else {}
    dist.init_process_group(
        backend=backend,
        init_method=init_method,
        rank=ranks.rank,
        world_size=ranks.world_size,
        timeout=timedelta(seconds=timeout_s),
        **bound,
    )


class WorkerFailure(RuntimeError):
    """A local worker raised or died; the message names the root cause."""


STOP_GRACE_S = 5.0
STOPPED_LIMIT_S = 10.0  # a worker stopped (SIGSTOP, a debugger) this long fails the run
POLL_S = 0.2
ECHO_GRACE_S = 2.0  # how long a collective's echo waits for the error of the rank it echoes


def spawn_local(
    fn: Callable[..., None],
    args: tuple,
    nprocs: int,
    threads_per_worker: int,
    start_method: str = "forkserver",
    scratch: Path | None = None,
    preload: Sequence[str] = (),
) -> None:
    """Start ``nprocs`` processes on this host as ``fn(local_rank, init_method, *args)`` and
    supervise them until they end.

    They rendezvous through a FileStore in a private directory under ``scratch`` (the results
    directory's scratch space; the system's temporary directory without it), removed when they
    end; what a killed launcher leaves there is removed by the next command on that results
    directory.
    The first worker that dies, raises or stays stopped stops its siblings at once (they would
    otherwise wait in a collective until the process-group timeout) and raises WorkerFailure
    naming it; an interrupt of the launcher (Ctrl-C, SIGTERM turned into an exception) stops
    them too before it propagates, and a worker whose launcher has ended however it ended
    (SIGKILL included) stops itself (``Lifeline``).

    With ``forkserver`` (the default), workers are forked from one server per launcher process
    that has imported torch, ``fn``'s module and the modules in ``preload`` (what the workers
    would each import again) once: a short 2-worker run after the first then takes about 2 s
    instead of 10 (a 2-core VM), which adds up over a sweep. Each worker is given this process's
    environment, working directory, stdout and stderr as they are now, as with ``spawn``
    (``LauncherContext``; the server's own are those of its start).
    """
    # Each child picks the thread count up at import; set it before they start.
    os.environ["OMP_NUM_THREADS"] = str(threads_per_worker)
    if start_method == "forkserver":
        preload_for_forkserver(fn, preload)
    with loopback_for_local_ranks():
        _spawn_and_supervise(fn, args, nprocs, start_method, scratch)


@contextlib.contextmanager
def loopback_for_local_ranks() -> Iterator[None]:
    """GLOO_SOCKET_IFNAME=lo (unless set) while workers that all live on this host start.
    Only for them: a job submitted later from this process (a SLURM sweep run in-process)
    inherits this environment, and loopback cannot reach another node."""
    if not sys.platform.startswith("linux") or "GLOO_SOCKET_IFNAME" in os.environ:
        yield
        return
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    try:
        yield
    finally:
        os.environ.pop("GLOO_SOCKET_IFNAME", None)


def _spawn_and_supervise(
    fn: Callable[..., None], args: tuple, nprocs: int, start_method: str, scratch: Path | None
) -> None:
    if scratch is not None:
        scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="dpsuite-store-", dir=scratch) as tmp:
        init_method = Path(tmp, "store").as_uri()
        lifeline = Lifeline()
        processes: list = []
        try:
            start_workers(
                processes,
                start_method,
                nprocs,
                (fn, init_method, tmp, LauncherContext(), lifeline, *args),
            )
            supervise(processes, Path(tmp))
        except BaseException:
            lifeline.cut()  # also ends a worker whose start this interrupted (its pid unknown)
            stop_workers(processes)
            raise
        finally:
            for p in processes:
                p.join()
            lifeline.close()


def start_workers(processes: list, start_method: str, nprocs: int, args: tuple) -> None:
    """Start ``nprocs`` workers as ``_child(local_rank, *args)``, appending each to
    ``processes`` as it starts (an interrupt half-way leaves the started ones there to stop).

    Each starts with SIGINT held back until its own handler is in place: a terminal's Ctrl-C
    reaches the whole process group, and a worker still importing would print a
    KeyboardInterrupt traceback. The launcher stops its workers itself.
    """
    context = multiprocessing.get_context(start_method)
    if start_method == "forkserver":
        start_forkserver()
    for i in range(nprocs):
        process = context.Process(target=_child, args=(i, *args), name=f"dpsuite-worker-{i}")
        with sigint_held():  # inherited by a forked or spawned worker (the forkserver's: its own)
            process.start()
        processes.append(process)


def start_forkserver() -> None:
    """Start this process's forkserver (if not yet) with SIGINT held back: it imports torch
    before it sets its own handlers, and the workers it forks inherit its signal mask."""
    from multiprocessing import forkserver, resource_tracker

    resource_tracker.ensure_running()  # it unblocks SIGINT when it starts: first, outside
    with sigint_held():
        forkserver.ensure_running()


@contextlib.contextmanager
def sigint_held() -> Iterator[None]:
    """Block SIGINT in this thread (a process started meanwhile inherits the mask)."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def supervise(processes, tmp: Path) -> None:
    """Wait until every worker has exited 0; WorkerFailure at the first one that does not."""
    stopped_since: dict[int, float] = {}
    while True:
        codes = [p.exitcode for p in processes]
        if all(c == 0 for c in codes):
            return
        failed = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
        if failed:  # read before any sibling is stopped by us: its exit says nothing
            wait_for_cause(processes, tmp)
            failed = [
                (i, p.exitcode) for i, p in enumerate(processes) if p.exitcode not in (None, 0)
            ]
            raise WorkerFailure(failure_reason(failed, tmp))
        now = time.monotonic()
        for i, p in enumerate(processes):
            if p.exitcode is None and process_state(p.pid) == "T":
                since = stopped_since.setdefault(i, now)
                if now - since >= STOPPED_LIMIT_S:
                    raise WorkerFailure(
                        f"no progress from rank {i} for {now - since:.0f} s: its process is "
                        "stopped (SIGSTOP or a debugger)"
                    )
            else:
                stopped_since.pop(i, None)
        mp_connection.wait([p.sentinel for p in processes if p.exitcode is None], POLL_S)


def process_state(pid: int) -> str | None:
    """The state letter of a Linux process (R, S, T, Z, ...), None where it cannot be read."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def preload_for_forkserver(fn: Callable[..., None], modules: Sequence[str] = ()) -> None:
    """Have the forkserver import torch, ``fn``'s module and ``modules`` before it forks any
    worker (a module that cannot be imported is skipped there).

    Takes effect when this process's forkserver starts (its first worker); later calls change
    nothing. ``__main__`` is left out: a script without a main guard would run again in it.
    """
    wanted = ["torch", fn.__module__, *modules]
    multiprocessing.set_forkserver_preload(list(dict.fromkeys(wanted)))


class LauncherContext:
    """What a worker takes from its launcher as it starts: environment, working directory,
    stdout and stderr as they are now.

    A spawned worker inherits them anyway; a forked one starts with its forkserver's, fixed
    when the server started (before this run set OMP_NUM_THREADS, GLOO_SOCKET_IFNAME and the
    progress relay, and perhaps with output going elsewhere, e.g. under pytest's capture).
    """

    def __reduce__(self):
        # Runs while the worker's arguments are pickled for it: DupFd hands it the descriptors.
        stdio = (reduction.DupFd(1), reduction.DupFd(2))
        return (_enter_launcher_context, (dict(os.environ), os.getcwd(), stdio))


def _enter_launcher_context(environ: dict[str, str], cwd: str, stdio: tuple) -> None:
    os.environ.clear()
    os.environ.update(environ)
    os.chdir(cwd)
    sys.stdout.flush()
    sys.stderr.flush()
    for target, dup in zip((1, 2), stdio, strict=True):
        fd = dup.detach()
        if fd != target:
            os.dup2(fd, target)
            os.close(fd)


def _child(
    local_rank: int,
    fn: Callable[..., None],
    init_method: str,
    tmp: str,
    _context: None,
    lifeline: int | Lifeline,
    *args,
) -> None:
    """A worker: the launcher's context is already entered (while its arguments were read).

    It ends with exit code 1 after recording its error for the launcher, never with a
    traceback on the terminal (the launcher names the cause in one line)."""
    own_temporary_directory()
    try:
        watch_launcher(lifeline)  # LauncherGone may come at once: inside the `try`
        fn(local_rank, init_method, *args)
    except BaseException as exc:  # the launcher names this worker's first line, not a pickle
        error = f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:300]
        if isinstance(exc, KeyboardInterrupt):
            error = "interrupted"
        mine = {"error": error, "echo": is_peer_echo(exc)}
        with contextlib.suppress(OSError):
            Path(tmp, f"error-{local_rank}.json").write_text(json.dumps(mine))
        sys.exit(1)  # never an exit that reads as done, never a traceback on the terminal


def own_temporary_directory() -> None:
    """Let this worker's own processes (its DataLoader workers) make their multiprocessing
    temporary directory, instead of sharing the launcher's.

    A worker inherits the launcher's (Process objects carry it), where a loader worker's socket
    for passing a batch's file descriptors is made. The launcher removes that directory as it
    exits: after a failed run, loader workers still ending then print a FileNotFoundError
    traceback each. A directory of each loader worker's own is removed by that worker."""
    multiprocessing.current_process()._config.pop("tempdir", None)


# How a collective fails on a rank whose peer has gone (it raised, exited, was killed): the
# rank's error echoes the peer's, which is the cause.
PEER_GONE = re.compile(
    r"closed by peer|reset by peer|broken pipe|connection refused|gloo/transport|"
    r"NCCL communicator was aborted|timed out waiting|socket timeout|collective operation timeout",
    re.IGNORECASE,
)


def is_peer_echo(exc: BaseException) -> bool:
    """Whether ``exc`` is a collective's failure because a peer went away, not an error of
    this rank's own."""
    return isinstance(exc, dist.DistError) or (
        isinstance(exc, RuntimeError) and bool(PEER_GONE.search(str(exc)))
    )


class LauncherGone(KeyboardInterrupt):
    """Raised in a worker whose launcher has ended (killed, even by SIGKILL): it stops as if
    interrupted, and rank 0 marks the run failed."""


class Lifeline(Pipe):
    """A pipe whose write end only the launcher holds; each worker watches the read end.

    The kernel closes the write end however the launcher ends (SIGKILL included), so a
    worker sees EOF and stops itself. Why not "die with parent" (PR_SET_PDEATHSIG): a
    forkserver's worker is the server's child, not the launcher's, and the server outlives
    the launcher as long as any worker does (each holds the server's "alive" pipe), so that
    signal never comes. The pipe works for every start method and any process tree.
    """

    def cut(self) -> None:
        """Tell every worker the launcher is going: each stops itself."""
        self.close_write_end()

    def __reduce__(self):
        # A spawned or forkserver worker is handed a duplicate of the read end only.
        return (_received_fd, (reduction.DupFd(self.read_fd),))


def _received_fd(dup) -> int:
    return dup.detach()


LAUNCHER_GONE_GRACE_S = 10.0  # for rank 0 to mark the run before the worker exits regardless


@functools.cache
def _devnull() -> TextIO:
    """Where a stuck worker's last tracebacks go: nowhere (the launcher names the cause); kept
    open for faulthandler's thread."""
    return open(os.devnull, "w")  # noqa: SIM115


def watch_launcher(lifeline: int | Lifeline) -> None:
    """In a worker: when the launcher is gone, raise LauncherGone in this (main) thread, and
    exit after LAUNCHER_GONE_GRACE_S if that has not ended the worker (blocked in a
    collective or a rendezvous that never returns to Python).

    Until then SIGINT (a terminal's Ctrl-C, which reaches every process of the group) is
    ignored: the launcher stops its workers itself."""
    if isinstance(lifeline, Lifeline):  # forked: this process holds the write end too
        os.close(lifeline.write_fd)
        fd = lifeline.read_fd
    else:
        fd = lifeline
    gone = threading.Event()

    def on_sigint(signum, frame) -> None:
        if gone.is_set():
            raise LauncherGone("interrupted: the launcher has ended")

    signal.signal(signal.SIGINT, on_sigint)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # held since it started
    main = threading.get_ident()

    def watch() -> None:
        with contextlib.suppress(OSError):
            while os.read(fd, 1):
                pass
        # The exit after the grace period is faulthandler's C thread, which needs no GIL: the
        # main thread may hold the GIL while blocked in C++ (a process group's teardown waiting
        # on its own threads), and then a Python thread would never wake from its sleep.
        faulthandler.dump_traceback_later(LAUNCHER_GONE_GRACE_S, exit=True, file=_devnull())
        gone.set()
        signal.pthread_kill(main, signal.SIGINT)  # a real signal: it interrupts a wait

    threading.Thread(target=watch, name="dpsuite-launcher-watch", daemon=True).start()


def failure_reason(failed: list[tuple[int, int]], tmp: Path) -> str:
    """Name the first cause among the workers found exited: one killed by a signal (nobody in
    this launcher has signalled any yet), else a rank's own error (any rank that has written
    one, exited or not) before a collective's echo of a peer that went away."""
    for i, code in failed:
        if code < 0:
            return f"worker {i} died ({signal.Signals(-code).name})"
    errors = worker_errors(tmp)
    if errors:
        rank = min(errors, key=lambda r: (errors[r][1], r))  # its own error, then the lowest
        return f"rank {rank}: {errors[rank][0]}"
    i, code = failed[0]
    return f"worker {i} exited with code {code}"


def wait_for_cause(processes, tmp: Path) -> None:
    """When every error written so far is an echo of a peer that went away, give the workers
    still alive (the peer, tearing down) a moment to write their own and exit."""
    deadline = time.monotonic() + ECHO_GRACE_S
    while time.monotonic() < deadline:
        errors = worker_errors(tmp)
        alive = [p.sentinel for p in processes if p.exitcode is None]
        if not alive or not errors or not all(echo for _, echo in errors.values()):
            return
        mp_connection.wait(alive, POLL_S)


def worker_errors(tmp: Path) -> dict[int, tuple[str, bool]]:
    """Each worker's error as it wrote it: rank -> (first line, whether a peer's echo)."""
    errors = {}
    for file in tmp.glob("error-*.json"):
        try:
            rank = int(file.stem.removeprefix("error-"))
            written = json.loads(file.read_text())
            errors[rank] = (str(written["error"]), bool(written.get("echo")))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return errors


def stop_workers(processes) -> None:
    """SIGTERM every live worker (continuing a stopped one, so it can act on it), then SIGKILL
    what is left after a grace period."""
    for p in processes:
        if p.is_alive():
            p.terminate()
            with contextlib.suppress(OSError):
                os.kill(p.pid, signal.SIGCONT)
    for p in processes:
        p.join(STOP_GRACE_S)
        if p.is_alive():
            p.kill()
            p.join()


def active() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def barrier() -> None:
    """Wait for every rank (nothing to wait for without a process group)."""
    if active():
        dist.barrier()


def parameter_digest(model: nn.Module) -> str:
    """SHA-256 over the exact bytes of every parameter and buffer."""
    h = hashlib.sha256()
    for t in list(model.parameters()) + list(model.buffers()):
        h.update(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def check_identical_replicas(model: nn.Module) -> str:
    """Verify that every rank starts from bit-identical parameters; returns the digest."""
    digest = parameter_digest(model)
    if active():
        digests: list[str | None] = [None] * dist.get_world_size()
        dist.all_gather_object(digests, digest)
        if len(set(digests)) != 1:
            raise RuntimeError(f"ranks built different initial parameters: {digests}")
    return digest


def all_reduce_sum(values: list[float], device: torch.device) -> list[float]:
    """Sum a few scalars across ranks (float64), as plain floats."""
    t = torch.tensor(values, dtype=torch.float64, device=device)
    if active():
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.tolist()


def max_across_ranks(values: list[float], device: torch.device) -> list[float]:
    """Element-wise max across ranks of a same-length list of floats (float64)."""
    if not values:
        return []
    return gather_max(torch.tensor(values, dtype=torch.float64, device=device)).cpu().tolist()


def gather_max(values: torch.Tensor) -> torch.Tensor:
    """Element-wise max of a same-shaped tensor across ranks."""
    if active():
        values = values.clone()
        dist.all_reduce(values, op=dist.ReduceOp.MAX)
    return values


def shutdown() -> None:
    """Leave the process group so that no rank aborts at exit.

    With gloo, a rank that exits while peers still hold the DDP reducer's communication threads
    can abort ("terminate called without an active exception"). The caller drops the DDP model
    and optimizer first; here we collect them, meet at a barrier and destroy the group.
    """
    if not (dist.is_available() and dist.is_initialized()):
        return  # nothing to leave; a full collection per run would slow in-process sweeps
    gc.collect()
    try:
        dist.barrier()
    finally:
        dist.destroy_process_group()
