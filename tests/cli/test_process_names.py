"""`worktrain web` and `worktrain worker` read so in `top` and `ps` (issue 33's polish), not
`python -m cli ...`: each names its process (prctl PR_SET_NAME, of which the kernel keeps 15
bytes; setproctitle for the command line), and leaves its environment readable."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli.procs import descendants, read_stat
from daemon.host.embedded_redis import RedisServer

from .conftest import FIXTURE_WORKFLOWS, ROOT, start_web

pytestmark = pytest.mark.processes


def comm(pid: int) -> str:
    return Path(f"/proc/{pid}/comm").read_text().strip()


def ps_comm(pid: int) -> str:
    return ps(pid, "comm")


def ps(pid: int, field: str) -> str:
    done = subprocess.run(["ps", "-o", f"{field}=", "-p", str(pid)], capture_output=True, text=True)
    return done.stdout.strip()


def environ(pid: int) -> str:
    return Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")


def forked_pythons(root: int) -> list[int]:
    """The pool's forked workers: its children running the same interpreter (not the sandbox
    probes, `unshare` and `sh`, which come and go, nor RQ's scheduler, which one worker forks
    before it retitles itself: a grandchild keeping the title it was forked with)."""
    exe = os.readlink(f"/proc/{root}/exe")
    found = []
    for process in descendants(root):
        try:
            stat = read_stat(process.pid)
            if stat is not None and stat[0] == root and os.readlink(f"/proc/{process.pid}/exe") == exe:
                found.append(process.pid)
        except OSError:  # it already ended
            continue
    return found


def test_the_web_process_is_named_worktrain_web(redis_server: RedisServer, tmp_path: Path) -> None:
    web = start_web(tmp_path, redis_server.url)  # returns once /readyz answers
    try:
        assert comm(web.process.pid) == "worktrain web"
        assert ps_comm(web.process.pid) == "worktrain web"
        assert ps(web.process.pid, "args").startswith("worktrain web "), ps(web.process.pid, "args")
        assert "WORKTRAIN_DATA_DIR=" in environ(web.process.pid)  # the title did not take its room
    finally:
        web.stop()


def test_the_worker_processes_are_named_worktrain_worker(redis_server: RedisServer, tmp_path: Path) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("WORKTRAIN_", "REDIS_"))},
        "REDIS_URL": redis_server.url,
        "WORKTRAIN_DATA_DIR": str(tmp_path / "data"),
        "WORKTRAIN_WORKFLOWS_DIR": str(FIXTURE_WORKFLOWS),
        "WORKTRAIN_FORBID_REAL_API": "1",
    }
    with open(tmp_path / "worker.log", "wb") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "cli", "worker", "--processes", "2"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
    try:
        deadline = time.monotonic() + 30
        while len(children := forked_pythons(worker.pid)) < 2 and time.monotonic() < deadline:
            assert worker.poll() is None, (tmp_path / "worker.log").read_text(errors="replace")
            time.sleep(0.1)
        names = {pid: comm(pid) for pid in [worker.pid, *children]}
        assert len(names) >= 3, names  # the pool and its two RQ workers
        # 15 bytes: the kernel's comm limit cuts "worktrain worker" there.
        assert set(names.values()) == {"worktrain worke"}, names
        assert ps_comm(worker.pid) == "worktrain worke"
        assert ps(worker.pid, "args") == "worktrain worker --processes 2"
        # each RQ worker: RQ's own state line, under WorkTrain's name (worker/proctitle.py), once
        # it listens (until then, the title it forked with); as long as the command line it
        # started with, no longer (SPT_NOENV)
        titles: dict[int, str] = {}

        def listening() -> bool:
            titles.update({pid: ps(pid, "args") for pid in children})
            return all(t.startswith("worktrain worker [") for t in titles.values())

        while not listening() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert listening(), titles
        assert all(f"WORKTRAIN_DATA_DIR={tmp_path}" in environ(pid) for pid in names)
    finally:
        stop_or_kill(worker, tmp_path / "worker.log")


def stop_or_kill(worker: subprocess.Popen[bytes], log: Path) -> None:
    """SIGTERM, as an operator stops it; a pool that outlives 30 s of it is a failure, and
    its whole tree is killed so it takes no other test's sessions."""
    tree = [worker.pid, *(p.pid for p in descendants(worker.pid))]
    worker.terminate()
    try:
        worker.wait(30)
    except subprocess.TimeoutExpired:
        for pid in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        worker.wait()
        text = log.read_text(errors="replace")
        raise AssertionError(f"the worker outlived 30 s of SIGTERM: {text}") from None
