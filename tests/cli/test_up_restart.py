"""`worktrain up` restarts a worker tier killed under it (issue 12): real processes end to end.

Mid-session, SIGKILL goes to the worker's whole tree (the pool, its RQ worker, the work
horse running the session: the session resumes once its lease lapses), or to the pool's
parent alone (its RQ worker shuts down warmly: the session is handed over at its turn
boundary). Either way `up` keeps running and the web tier stays ready; a new worker process
starts; the session resumes on it and completes, and the steer sent before the kill reaches
the agent exactly once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from cli.procs import Proc, descendants, read_stat
from tests.cli.conftest import Cli, wait_http_ok
from tests.cli.test_e2e import STEER, dispatch_steered, launch_up, processes_mentioning

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

LEASE = 2.0


@pytest.fixture
def up_one_worker(tmp_path: Path) -> Iterator[dict[str, Any]]:
    args = ["--workers", "1", "--fake-latency", "0.5"]
    yield from launch_up(tmp_path, args, WORKTRAIN_LEASE_SECONDS=str(LEASE))


def wait_for(predicate: Any, what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def redis_of(data_dir: Path) -> redis.Redis:
    state = json.loads((data_dir / "up.json").read_text())
    password = (data_dir / "redis" / "password").read_text().strip()
    return redis.Redis.from_url(state["redisUrl"], password=password, decode_responses=True)


def worker_pid(data_dir: Path) -> int:
    return int(json.loads((data_dir / "up.json").read_text())["children"]["worker"])


def ready(api_url: str) -> bool:
    """/readyz answers 200 (within 10 s: the machine is shared and may be slow)."""
    wait_http_ok(f"{api_url}/readyz", timeout=10.0)
    return True


@pytest.mark.parametrize("victim", ["tree", "parent"])
def test_a_worker_killed_under_up_is_restarted_and_its_session_resumes(up_one_worker, tmp_path, victim):
    process: subprocess.Popen[bytes] = up_one_worker["process"]
    data_dir: Path = up_one_worker["data_dir"]
    api_url = f"http://127.0.0.1:{up_one_worker['port']}"
    cli = Cli(api_url, token=None, env={"WORKTRAIN_DATA_DIR": str(data_dir)})  # up's own token
    client = redis_of(data_dir)
    sid = dispatch_steered(cli, tmp_path / "workspace")
    key = f"wt:session:{{{sid}}}"
    # Mid-session: the steer went into turn 1, whose model call (0.5 s) is under way.
    wait_for(lambda: client.hget(key, "status") == "running" and client.hget(key, "worker"), "a horse")
    wait_for(lambda: "steer_delivered" in json.dumps(client.xrange(f"{key}:events")), "turn 1")
    first = client.hget(key, "worker")

    killed = worker_pid(data_dir)
    stat = read_stat(killed)
    assert stat is not None
    tree = [Proc(killed, stat[2]), *descendants(killed)]  # (pid, start time): no reused pid
    horse = int(str(first).rsplit(":", 2)[1])
    assert horse in [p.pid for p in tree], (horse, tree)
    for proc in tree if victim == "tree" else tree[:1]:
        os.kill(proc.pid, signal.SIGKILL)
    killed_at = time.monotonic()

    restarted = wait_for(lambda: worker_pid(data_dir) != killed and worker_pid(data_dir), "a new worker")
    restarted_after = time.monotonic() - killed_at
    assert process.poll() is None and ready(api_url)
    assert restarted in {p.pid for p in descendants(process.pid)}
    record = wait_for(
        lambda: (r := client.hgetall(key)).get("status") in ("completed", "failed", "cancelled") and r,
        "the session to end",
        timeout=60,
    )
    assert (record["status"], record["outcome"]) == ("completed", "workflow_complete"), record
    print(
        f"kill -9 of the worker {victim}: restarted after {restarted_after:.1f}s, session completed"
        f" {time.monotonic() - killed_at:.1f}s after the kill (lease {LEASE:g}s)"
    )
    assert ready(api_url) and process.poll() is None

    events = [json.loads(fields["data"]) for _, fields in client.xrange(f"{key}:events")]
    resumed = [e for e in events if e["kind"] == "session_resumed"]
    assert resumed and resumed[0]["worker"] != first, resumed  # on the restarted worker
    journal = [fields for _, fields in client.xrange(f"{key}:steers")]
    assert [e["type"] for e in journal] == ["accepted", "delivered"], journal
    # The messages the agent is given (their `meta` is bookkeeping, never sent): the steer once.
    given = [json.dumps(json.loads(m)["content"]) for m in client.lrange(f"{key}:history", 0, -1)]
    assert "\n".join(given).count(STEER) == 1, given

    err = (tmp_path / "up.err").read_text()
    assert f"worker (pid {killed}) was killed by SIGKILL after " in err, err
    assert "restarting worker in 0.5s (crash 1 within 60s; crash 5 stops the stack)" in err, err
    assert f"worker restarted (pid {restarted})" in err, err
    log = (data_dir / "logs" / "worker.log").read_text()
    assert "--- worktrain up: worker restarted (restart 1) ---" in log

    stack = descendants(process.pid)
    started = time.monotonic()
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=15) == 0
    assert time.monotonic() - started < 10
    assert [p for p in stack if p.alive()] == []
    assert [p for p in tree if p.alive()] == []  # the killed worker's orphans too
    assert processes_mentioning(str(tmp_path)) == []
