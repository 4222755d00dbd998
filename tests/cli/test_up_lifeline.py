"""`kill -9` of `worktrain up` takes its whole tree with it: Redis, the fake model, web (and
the web server's workers), the worker pool (and its RQ workers). Each child of `up` gets a
parent-death signal (cli/procs.py), each grandchild one from its own parent
(daemon/host/lifeline.py): nothing is left running, nothing keeps listening."""

from __future__ import annotations

import signal
import socket
import time
from pathlib import Path

import pytest

from cli.procs import descendants, signal_all
from tests.cli.test_e2e import launch_up

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_kill_9_of_up_leaves_no_process_and_no_listener(tmp_path: Path) -> None:
    for stack in launch_up(tmp_path, ["--workers", "1", "--fake-latency", "0"]):
        process = stack["process"]
        tree = descendants(process.pid)
        names = " ".join(Path(f"/proc/{p.pid}/cmdline").read_bytes().decode(errors="replace") for p in tree)
        assert "redis-server" in names and "daemon.fakemodel" in names, names
        assert "web" in names and "worker" in names, names
        assert len(tree) >= 6, names  # redis, fake model, web + its workers, worker + its RQ worker
        try:
            process.kill()
            process.wait()
            deadline = time.monotonic() + 15
            while any(p.alive() for p in tree) and time.monotonic() < deadline:
                time.sleep(0.1)
            left = [p.pid for p in tree if p.alive()]
            assert left == [], f"outlived `up`: {left}"
            assert not listening(stack["port"])
        finally:
            signal_all(tree, signal.SIGKILL)
