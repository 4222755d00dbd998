"""Ctrl-C of `./scripts/run 2>&1 | tee up.log` (issue 45, item 6): the terminal's SIGINT kills
`tee` too, so `up`'s output pipe is closed when it starts stopping. Before, the first line it
said then raised BrokenPipeError: `up` died without stopping anything, and its children got
their parent-death SIGTERM all at once — Redis could be gone while the workers were still
handing their sessions over. Now the stop does not depend on the terminal: the workers stop
first, then the web tier, then Redis (judged here by when each process actually ended), its
lines are in `<data>/logs/up.log`, and the session handed over resumes at the next `up`.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from cli.procs import PROC, Proc, descendants, read_stat
from daemon.host.embedded_redis import free_port
from daemon.turn.messages import HANDOFF_NOTE, RESUME_NOTE
from tests.cli.conftest import Cli
from tests.cli.test_e2e import clean_env, dispatch_steered, worktrain_argv
from tests.cli.test_up_restart import redis_of, wait_for
from tests.cli.test_up_stop_handover import parse, start_up, stop

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


def start_up_into_a_pipe(home: Path, port: int, redis_port: int) -> tuple[subprocess.Popen[bytes], int]:
    """`up` with stdout and stderr on one pipe (as `2>&1 | tee`), read until the banner;
    returns the process and the pipe's read end."""
    env = clean_env(home, WORKTRAIN_DATA_DIR=str(home / ".worktrain"))
    argv = [*worktrain_argv(), "up", "--port", str(port), "--redis-port", str(redis_port)]
    argv += ["--workers", "1", "--fake-latency", "10"]
    read_end, write_end = os.pipe()
    process = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=write_end, stderr=write_end)
    os.close(write_end)
    seen = b""
    deadline = time.monotonic() + 90
    while b"Ctrl-C stops everything" not in seen:
        assert time.monotonic() < deadline and process.poll() is None, seen.decode(errors="replace")
        ready, _, _ = select.select([read_end], [], [], 0.5)
        if ready:
            seen += os.read(read_end, 65536)
    return process, read_end


def comm(pid: int) -> str:
    try:
        return (PROC / str(pid) / "comm").read_text().strip()
    except OSError:
        return ""


def tree(pid: int) -> list[Proc]:
    """`pid` and every process below it."""
    stat = read_stat(pid)
    assert stat is not None, f"{pid} is gone"
    return [Proc(pid, stat[2]), *descendants(pid)]


class Deaths:
    """When each watched group of processes had all ended (monotonic), polled every 5 ms."""

    def __init__(self, groups: dict[str, list[Proc]]) -> None:
        self.groups = groups
        self.ended: dict[str, float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.stop.wait(0.005):
            now = time.monotonic()
            for name, procs in self.groups.items():
                if name not in self.ended and not any(p.alive() for p in procs):
                    self.ended[name] = now


def test_up_stops_workers_then_web_then_redis_with_its_output_pipe_closed(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    data_dir = home / ".worktrain"
    port, redis_port = free_port(), free_port()
    first, read_end = start_up_into_a_pipe(home, port, redis_port)
    second = None
    try:
        cli = Cli(f"http://127.0.0.1:{port}", token=None, env={"WORKTRAIN_DATA_DIR": str(data_dir)})
        sid = dispatch_steered(cli, tmp_path / "workspace")
        client = redis_of(data_dir)
        key = f"wt:session:{{{sid}}}"
        wait_for(lambda: client.hget(key, "turnId") == "1", "turn 1 live")  # its call takes 10 s
        client.close()
        children = json.loads((data_dir / "up.json").read_text())["children"]
        below = descendants(first.pid)
        redis_procs = [p for p in below if comm(p.pid) == "redis-server"]
        groups = {"workers": tree(children["worker"]), "web": tree(children["web"]), "redis": redis_procs}
        assert redis_procs and len(groups["workers"]) >= 2, (below, children)
        os.close(read_end)  # `tee` dies of the same Ctrl-C, first
        deaths = Deaths(groups)
        sent = time.monotonic()
        first.send_signal(signal.SIGINT)
        code = first.wait(30)
        stopped_at = round(time.monotonic() - sent, 3)
        # (before, `up` died at once and its children died of their parent-death signal after it)
        wait_for(lambda: len(deaths.ended) == len(groups), "every group ended", timeout=15)
        deaths.stop.set()
        deaths.thread.join()
        ended = {name: round(at - sent, 3) for name, at in deaths.ended.items()}
        print(f"up exited {code} {stopped_at}s after SIGINT; each group ended after it (s): {ended}")
        assert set(ended) == {"workers", "web", "redis"}, ended
        assert ended["workers"] < ended["web"] < ended["redis"], ended
        assert code == 0 and ended["redis"] <= stopped_at < 10, (code, stopped_at, ended)
        log = (data_dir / "logs" / "up.log").read_text()
        print(log[-600:])
        said = [line.split(" ", 2)[-1] for line in log.splitlines()]
        order = [next(i for i, line in enumerate(said) if line.startswith(f"worktrain: {name} stopped"))
                 for name in ("worker", "web", "redis-server")]  # fmt: skip
        assert order == sorted(order) and "worktrain: stopped." in said, said[-8:]
        assert "is gone" in log  # the broken pipe was noticed and said where it can be read

        second = start_up(home, tmp_path, "up2", port, redis_port)
        client = redis_of(data_dir)
        kinds = lambda: [parse(entry).get("kind") for entry in client.xrange(f"{key}:events")]  # noqa: E731
        wait_for(lambda: "session_resumed" in kinds(), "the session resumed by the next up", timeout=60)
        history = wait_for(
            lambda: [m for m in client.lrange(f"{key}:history", 0, -1) if "moved to another worker" in m],
            "the resumed turn checkpointed",
            timeout=60,
        )
        # ground truth of a clean hand-over (Redis was there while the worker handed it over)
        assert HANDOFF_NOTE.split(":")[0] in history[-1] and RESUME_NOTE[:60] not in history[-1]
        client.close()
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                stop(process)
