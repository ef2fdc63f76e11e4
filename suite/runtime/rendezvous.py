"""Where the ranks of a job that spans nodes meet, and over which network interface.

SLURM names the job's nodes; the first one hosts the rendezvous (MASTER_ADDR). Its address is
the one SLURM itself reaches it at (the node's NodeAddr), since a node name need not resolve
everywhere. gloo and NCCL then bind to the interface that this host's route to the master goes
out of (GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME), so that rank-to-rank traffic crosses the
link between the nodes, not a loopback or a management interface picked by hostname lookup. A
rank that cannot reach the master says so in one line before any collective waits for it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import socket
import struct
import subprocess
from collections.abc import MutableMapping

SIOCGIFADDR = 0x8915  # Linux ioctl: an interface's IPv4 address
REACH_TIMEOUT_S = 10.0
IFNAME_KEYS = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")


class Unreachable(RuntimeError):
    """This rank cannot reach the master node: the job cannot rendezvous."""


def node_address(name: str) -> str:
    """The address SLURM reaches node ``name`` at (its NodeAddr); the name where none is known."""
    try:
        out = subprocess.run(
            ["scontrol", "show", "node", "--oneliner", name],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return name
    for field in out.split():
        if field.startswith("NodeAddr="):
            return field.split("=", 1)[1] or name
    return name


def source_address(addr: str) -> str:
    """The local address this host's route to ``addr`` leaves from (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect((socket.gethostbyname(addr), 9))
        except OSError as exc:
            raise Unreachable(f"no route to {addr}: {exc.strerror or exc}") from None
        return s.getsockname()[0]


def interface_address(name: str | None) -> str | None:
    """The IPv4 address of interface ``name`` (Linux), None if it has none."""
    if not name:
        return None
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            reply = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
        except OSError:
            return None
    return socket.inet_ntoa(reply[20:24])


def interface_with(address: str) -> str | None:
    """The network interface that holds IPv4 ``address`` (Linux), None if none does."""
    for _, name in socket.if_nameindex():
        if interface_address(name) == address:
            return name
    return None


def check_reachable(addr: str, port: int, source: str, timeout_s: float = REACH_TIMEOUT_S) -> None:
    """Unreachable unless ``addr`` answers on TCP from local address ``source`` (a refused
    connection is an answer: the master's store may simply not listen yet)."""
    try:
        with socket.create_connection((addr, port), timeout=timeout_s, source_address=(source, 0)):
            return
    except ConnectionRefusedError:
        return
    except OSError as exc:
        if exc.errno == errno.ECONNREFUSED:
            return
        raise Unreachable(f"no answer from {addr}:{port} ({exc.strerror or exc})") from None


def choose_interface(env: MutableMapping[str, str], rank: int) -> str:
    """Point gloo and NCCL at the interface towards MASTER_ADDR (unless already set); checks
    that a rank other than 0 reaches the master. Returns the interface."""
    master, port = env["MASTER_ADDR"], int(env.get("MASTER_PORT", "29500"))
    where = f"rank {rank} on {socket.gethostname()}"
    try:
        source = source_address(master)
        interface = interface_with(source)
        if interface is None:
            raise Unreachable(f"no interface holds {source}, the address towards {master}")
        for key in IFNAME_KEYS:  # a choice of the user's stands, if it can work
            env.setdefault(key, interface)
        chosen = interface_address(env["GLOO_SOCKET_IFNAME"])
        if chosen is None or chosen.startswith("127."):
            raise Unreachable(f"{env['GLOO_SOCKET_IFNAME']} is no interface to other nodes")
        if rank != 0:
            check_reachable(master, port, chosen)
    except Unreachable as exc:
        chosen = env.get("GLOO_SOCKET_IFNAME", "no interface")
        raise Unreachable(
            f"{where} cannot reach the master node {master} over {chosen}: {exc}; set "
            "MASTER_ADDR or GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME to a network both nodes share"
        ) from None
    return env["GLOO_SOCKET_IFNAME"]


def spans_nodes(env: MutableMapping[str, str]) -> bool:
    """This SLURM job (or step) has more than one node."""
    with contextlib.suppress(ValueError):
        return int(env.get("SLURM_STEP_NUM_NODES") or env.get("SLURM_JOB_NUM_NODES") or 1) > 1
    return False


def prepare(env: MutableMapping[str, str], master_is_node_name: bool) -> str | None:
    """In a job that spans nodes: MASTER_ADDR as the first node's address (when it is a node
    name from SLURM's node list, not the user's), the interface towards it chosen (returned).
    Nothing to do (None) on one node."""
    if not spans_nodes(env) or "MASTER_ADDR" not in env:
        return None
    if master_is_node_name:
        env["MASTER_ADDR"] = node_address(env["MASTER_ADDR"])
    return choose_interface(env, int(env.get("RANK", env.get("SLURM_PROCID", "0"))))


def name_peer(message: str, nodes: list[dict]) -> str:
    """A collective's error that names a peer's address, with the ranks and node behind it:
    ``ranks [1] on dn2 (10.213.0.12) stopped answering: <message>``."""
    for node in nodes:
        address = node.get("address")
        if address and f"[{address}]" in message:
            who = f"ranks {node['ranks']} on {node['hostname']} ({address})"
            return f"{who} stopped answering: {message}"
    return message
