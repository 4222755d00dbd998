"""The ground truth's own instruments (tests/crash/groundtruth.py): finding which process sent a
model request must not be fooled by the loopback traffic of a full suite run."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import pytest

from tests.crash.groundtruth import pid_of_peer

pytestmark = pytest.mark.redis


@contextmanager
def listener() -> Iterator[socket.socket]:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server


def reused_port_after_time_wait(model: socket.socket, other: socket.socket, stack: ExitStack) -> int:
    """A client port whose first connection (to `other`) lingers in TIME_WAIT (inode 0), now
    connected to `model`: /proc/net/tcp lists the port twice, in no set order."""
    first = stack.enter_context(socket.socket())
    first.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    first.bind(("127.0.0.1", 0))
    port = int(first.getsockname()[1])
    first.connect(other.getsockname())
    accepted, _ = other.accept()
    first.close()  # the side that closes first keeps TIME_WAIT
    accepted.close()
    second = stack.enter_context(socket.socket())
    second.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    second.bind(("127.0.0.1", port))
    second.connect(model.getsockname())
    return port


def test_the_sender_is_found_when_its_port_was_used_before_for_another_destination() -> None:
    """Matching the local port alone found the TIME_WAIT entry 32 times in 50 (a CI run's
    'every request's sending process was found' failure); the whole 4-tuple finds this
    process every time."""
    for _ in range(20):
        with listener() as model, listener() as other, ExitStack() as stack:
            port = reused_port_after_time_wait(model, other, stack)
            assert pid_of_peer(["127.0.0.1", port], int(model.getsockname()[1])) == os.getpid()


def test_a_connection_that_is_gone_has_no_sender() -> None:
    with listener() as model, listener() as other, ExitStack() as stack:
        port = reused_port_after_time_wait(model, other, stack)
        assert pid_of_peer(["127.0.0.1", port], int(other.getsockname()[1])) == 0  # only TIME_WAIT left
