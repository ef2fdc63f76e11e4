"""Choosing where the ranks of a job across nodes meet (the parts that need no second node)."""

from __future__ import annotations

import os
import socket

import pytest

from dpsuite.runtime import distributed, rendezvous

pytestmark = pytest.mark.skipif(not hasattr(socket, "if_nameindex"), reason="Linux interfaces")


def test_the_interface_that_holds_an_address_is_found():
    assert rendezvous.interface_with("127.0.0.1") == "lo"
    assert rendezvous.interface_address("lo") == "127.0.0.1"
    assert rendezvous.interface_address("no-such-if0") is None


def test_a_job_on_one_node_is_left_alone():
    env = {"SLURM_JOB_NUM_NODES": "1", "MASTER_ADDR": "node7"}
    assert rendezvous.prepare(env, master_is_node_name=True) is None
    assert env == {"SLURM_JOB_NUM_NODES": "1", "MASTER_ADDR": "node7"}


def test_loopback_towards_the_master_is_one_clear_error():
    """A master whose route leaves through loopback cannot be met from another node."""
    env = {"SLURM_JOB_NUM_NODES": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
    with pytest.raises(rendezvous.Unreachable) as err:
        rendezvous.prepare(env, master_is_node_name=False)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("rank 0 on ") and "cannot reach the master node 127.0.0.1" in message
    assert "lo is no interface to other nodes" in message


def test_a_peer_address_in_an_error_names_its_ranks_and_node():
    nodes = [
        {"hostname": "dn1", "address": "10.213.0.11", "ranks": [0]},
        {"hostname": "dn2", "address": "10.213.0.12", "ranks": [1]},
    ]
    error = "RuntimeError: [pair.cc:553] Connection closed by peer [10.213.0.12]:20192."
    assert rendezvous.name_peer(error, nodes) == (
        f"ranks [1] on dn2 (10.213.0.12) stopped answering: {error}"
    )
    assert rendezvous.name_peer("RuntimeError: out of memory", nodes) == (
        "RuntimeError: out of memory"
    )


def test_local_workers_get_loopback_only_while_they_start(monkeypatch):
    """A SLURM sweep run in this process later must not inherit GLOO_SOCKET_IFNAME=lo."""
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    with distributed.loopback_for_local_ranks():
        assert os.environ["GLOO_SOCKET_IFNAME"] == "lo"
    assert "GLOO_SOCKET_IFNAME" not in os.environ
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "eth7")  # the user's choice stands
    with distributed.loopback_for_local_ranks():
        assert os.environ["GLOO_SOCKET_IFNAME"] == "eth7"
    assert os.environ["GLOO_SOCKET_IFNAME"] == "eth7"
