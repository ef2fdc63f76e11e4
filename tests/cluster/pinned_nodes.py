"""Two test nodes on this host, each a network namespace of its own pinned to a core of its own.

Node 1 runs on CPU 0, node 2 on CPU 1 (``taskset``: every process started on a node, and what it
starts, may run only on its core), so a 2-node step no longer pays for two nodes time-sharing
the same cores. The nodes are joined by a veth pair (10.214.0.1 and 10.214.0.2 on their
``eth0``), each end's egress shaped with tbf to ``link_rate`` (1 Gbit/s, as the two-node SLURM
test cluster's link). What the nodes still share is the host: its memory bandwidth, caches and
kernel (the veth is the kernel's, not a NIC).

Root only (namespaces, links). The namespaces' names carry this process's pid, so two of these
can run side by side, and `stop` removes exactly what `start` created: the processes it started
(by pid), then the namespaces (which take the veth pair with them).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

NET = "10.214.0"
MASTER_PORT = 29731


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def _log_file(log: Path | None, rank: int):  # noqa: ANN202 - a file, or DEVNULL
    if log is None:
        return subprocess.DEVNULL
    log.parent.mkdir(parents=True, exist_ok=True)
    return open(log.with_name(f"{log.name}.rank{rank}.log"), "w")  # noqa: SIM115


class PinnedNodes:
    """Two namespaced nodes, node i on CPU ``cpus[i]``; `start`, `popen`/`run`, `stop`."""

    def __init__(self, cpus: Sequence[int] = (0, 1), link_rate: str = "1gbit") -> None:
        self.cpus = tuple(cpus)
        self.link_rate = link_rate
        self.namespaces = tuple(f"dps-pin{os.getpid()}-n{i + 1}" for i in range(len(cpus)))
        self.started: list[subprocess.Popen] = []
        self.created: list[str] = []

    def address(self, node: int) -> str:
        return f"{NET}.{node + 1}"

    def start(self) -> PinnedNodes:
        """The namespaces, the veth pair between them (shaped), loopback and addresses up."""
        try:
            for ns in self.namespaces:
                _ip("netns", "add", ns)
                self.created.append(ns)
            first, second = self.namespaces
            _ip("-n", first, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0",
                "netns", second)  # fmt: skip
            for node, ns in enumerate(self.namespaces):
                _ip("-n", ns, "addr", "add", f"{self.address(node)}/24", "dev", "eth0")
                _ip("-n", ns, "link", "set", "lo", "up")
                _ip("-n", ns, "link", "set", "eth0", "up")
                subprocess.run(
                    ["tc", "-n", ns, "qdisc", "add", "dev", "eth0", "root", "tbf", "rate",
                     self.link_rate, "burst", "512kb", "latency", "50ms"],
                    check=True, capture_output=True,
                )  # fmt: skip
        except BaseException:
            self.stop()
            raise
        return self

    def command(self, node: int, argv: Sequence[str]) -> list[str]:
        """``argv`` as node ``node`` runs it: in its namespace, under its own hostname (pn1,
        pn2), on its core."""
        ns, cpu = self.namespaces[node], self.cpus[node]
        named = ["unshare", "--uts", "--", "sh", "-c", 'hostname "$0" && exec "$@"']
        return ["ip", "netns", "exec", ns, *named, f"pn{node + 1}", "taskset", "-c", str(cpu),
                *argv]  # fmt: skip

    def popen(
        self, node: int, argv: Sequence[str], env: Mapping[str, str] | None = None, **kw
    ) -> subprocess.Popen:
        proc = subprocess.Popen(self.command(node, argv), env={**os.environ, **(env or {})}, **kw)
        self.started.append(proc)
        return proc

    def rank_env(self, rank: int, world: int) -> dict[str, str]:
        """What a rank of a job with one rank a node needs (torchrun's variables)."""
        return {
            "RANK": str(rank),
            "WORLD_SIZE": str(world),
            "LOCAL_RANK": "0",
            "LOCAL_WORLD_SIZE": "1",
            "MASTER_ADDR": self.address(0),
            "MASTER_PORT": str(MASTER_PORT),
            "GLOO_SOCKET_IFNAME": "eth0",
        }

    def run_on_both(self, argv: Sequence[str], timeout: float, log: Path | None = None) -> None:
        """``argv`` as a 2-rank job, one rank on each node; a rank that fails is a RuntimeError
        naming it (the other is stopped)."""
        procs = []
        for rank in range(len(self.namespaces)):
            out = _log_file(log, rank)
            procs.append(
                self.popen(rank, argv, self.rank_env(rank, len(self.namespaces)),
                           stdout=out, stderr=subprocess.STDOUT)
            )  # fmt: skip
        try:
            codes = [p.wait(timeout=timeout) for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        if any(codes):
            raise RuntimeError(f"{' '.join(argv)}: ranks exited {codes} (logs: {log})")

    def stop(self) -> None:
        """Exactly what `start` and `popen` created: the processes (by pid), then the
        namespaces, which take the veth pair with them."""
        for proc in self.started:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        self.started.clear()
        for ns in reversed(self.created):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self.created.clear()

    def leftovers(self) -> list[str]:
        """Namespaces of these nodes still on the host (none after `stop`)."""
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        names = {line.split()[0] for line in listed.splitlines() if line.strip()}
        return [ns for ns in self.namespaces if ns in names]

    def __enter__(self) -> PinnedNodes:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
