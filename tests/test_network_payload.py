"""A network moves its payload, not its line rate: the scaling model's TCP framing against a real
Linux TCP stream over a link this test builds and shapes.

Two network namespaces joined by a veth pair; the sender's egress shaped by tc's tbf to a line
rate that counts what an Ethernet wire carries besides each frame's header: preamble, FCS and
inter-frame gap, 24 bytes (tc's size table, ``stab overhead 24``), one frame at a time
(``gso_max_segs 1``: no offloaded super-packets the shaper would count once). The goodput a
TCP stream reaches must be what a profile with ``transport: tcp`` predicts for that line rate,
and below the line rate a profile without a transport takes as payload. Root only; the test
removes exactly the namespaces it made.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from dpsuite.analysis.scaling.profiles import load_profile

LINE_BIT_S = 50e6  # low enough that neither end needs much of a core on a 2-core machine
SEND_MB = 16
SKIP_MB = 2  # TCP's slow start and the shaper's burst: measured after these
PORT = 5001

RECEIVER = textwrap.dedent(
    f"""
    import socket, time
    server = socket.create_server(("10.214.0.2", {PORT}))
    print("listening", flush=True)
    conn, _ = server.accept()
    got, start = 0, None
    while chunk := conn.recv(1 << 20):
        got += len(chunk)
        if start is None and got >= {SKIP_MB} * 2**20:
            start, at_start = time.perf_counter(), got
    print((got - at_start) / (time.perf_counter() - start))
    """
)
SENDER = textwrap.dedent(
    f"""
    import socket
    with socket.create_connection(("10.214.0.2", {PORT})) as sock:
        sock.sendall(b"x" * ({SEND_MB} * 2**20))
    """
)


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@pytest.fixture
def shaped_link():
    """Namespaces A (10.214.0.1) and B (10.214.0.2), A's egress shaped to LINE_BIT_S."""
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("tc"):
        pytest.skip("needs root, ip and tc (network namespaces, a veth pair, tbf)")
    a, b = f"dps-np-a-{os.getpid()}", f"dps-np-b-{os.getpid()}"
    made = []
    try:
        for name in (a, b):
            ip("netns", "add", name)
            made.append(name)
        ip("link", "add", "va", "netns", a, "type", "veth", "peer", "name", "vb", "netns", b)
        for ns, dev, addr in ((a, "va", "10.214.0.1/24"), (b, "vb", "10.214.0.2/24")):
            ip("-n", ns, "addr", "add", addr, "dev", dev)
            ip("-n", ns, "link", "set", dev, "up", "gso_max_segs", "1")
        rate = f"{LINE_BIT_S / 1e6:g}mbit"
        subprocess.run(
            ["tc", "-n", a, "qdisc", "add", "dev", "va", "root", "stab", "overhead", "24"]
            + ["tbf", "rate", rate, "burst", "32kb", "latency", "100ms"],
            check=True,
            capture_output=True,
        )
        yield a, b
    finally:
        for name in made:  # deleting a namespace deletes its end of the veth, and so both
            subprocess.run(["ip", "netns", "del", name], capture_output=True)


def goodput_bytes_per_s(a: str, b: str) -> float:
    """A TCP stream from A to B, timed at B after its first SKIP_MB."""
    receiver = subprocess.Popen(
        ["ip", "netns", "exec", b, sys.executable, "-c", RECEIVER],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert receiver.stdout.readline().strip() == "listening"
        subprocess.run(
            ["ip", "netns", "exec", a, sys.executable, "-c", SENDER], check=True, timeout=60
        )
        out, _ = receiver.communicate(timeout=60)
    finally:
        receiver.kill()
    return float(out.strip())


def predicted_payload_bytes_per_s(tmp_path, transport: str = "") -> float:
    """The network bandwidth a profile of this link gives the scaling model."""
    path = tmp_path / "link.yaml"
    extra = f", transport: {transport}" if transport else ""
    path.write_text(
        "gpus_per_node: 1\nintra_node: {bandwidth_GB_s: 100, latency_us: 1}\n"
        f"inter_node: {{bandwidth_GB_s: {LINE_BIT_S / 8 / 1e9}, latency_us: 50{extra}}}\n"
    )
    return load_profile(str(path)).topology.inter.bandwidth_Bps


def test_tcp_over_a_shaped_ethernet_link_moves_what_the_tcp_framing_predicts(shaped_link, tmp_path):
    measured = goodput_bytes_per_s(*shaped_link)
    framed = predicted_payload_bytes_per_s(tmp_path, "tcp")  # 1448 of 1538 bytes a segment
    line = predicted_payload_bytes_per_s(tmp_path)
    assert framed == pytest.approx(LINE_BIT_S / 8 * 1448 / 1538)
    # Up to 3 % less when the two cores are busy elsewhere (measured: 0.9307-0.9415 of the line
    # rate, predicted 0.9415); never more: TCP without its timestamps option would be 0.8 %
    # more, the line rate taken as payload 6 %.
    assert 0.97 * framed < measured < 1.005 * framed < line, (measured, framed, line)
