"""`kill -9` of `worktrain web` takes its server workers with it: none is left listening.

The server's workers are armed with a parent-death signal (web/wsgi.py for granian,
web/serve.py's WebServer.load for gunicorn; daemon/host/lifeline.py). Without it, granian's
workers outlived a SIGKILLed parent as orphans (PPID 1) and kept answering /healthz.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from cli.procs import Proc, descendants, signal_all
from daemon.host.embedded_redis import RedisServer, free_port
from tests.leftovers import cmdline, listening, wait_gone
from tests.web.test_server import WORKTRAIN, env_for, wait_ready

pytestmark = pytest.mark.e2e


def both_workers(pid: int) -> list[Proc]:
    """The server's two worker processes, once both are there (the first may answer /readyz
    before the second is forked)."""
    deadline = time.monotonic() + 10
    while len(workers := [p for p in descendants(pid) if "web" in cmdline(p.pid)]) < 2:
        assert time.monotonic() < deadline, workers
        time.sleep(0.05)
    return descendants(pid)


@pytest.mark.parametrize("server", ["granian", "gunicorn"])
def test_kill_9_of_worktrain_web_leaves_no_worker_listening(
    server: str, redis_server: RedisServer, tmp_path: Path
) -> None:
    port = free_port()
    with (tmp_path / "web.log").open("wb") as log:
        process = subprocess.Popen(
            [str(WORKTRAIN), "web", "--port", str(port), "--server", server, "--workers", "2"],
            env=env_for(redis_server.url, tmp_path),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    workers = []
    try:
        wait_ready(process, port)
        workers = both_workers(process.pid)
        process.kill()  # SIGKILL: the parent can pass nothing on
        process.wait()
        orphans = wait_gone(workers, 10)
        assert orphans == [], f"{server} workers outlived `worktrain web`: {orphans}"
        deadline = time.monotonic() + 10
        while listening(port) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not listening(port)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        signal_all(workers, signal.SIGKILL)  # never leave one behind, even on failure
