"""Ctrl-C of `worktrain up` with a model call in flight (issue 33, item 1): the stop cuts the
live turn (the call is abandoned, not waited for), hands the session over (released and
re-enqueued) and `up` is back within a few seconds, without "killed it"; the next `up` on the
same data dir resumes the session at once, not after a lease (30 s by default) has lapsed.

With the default 10 s of fake latency the call is certain to be in flight when SIGINT comes.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from daemon.bus.streams.eventsink import STREAM_FIELD
from daemon.host.embedded_redis import free_port
from daemon.turn.messages import HANDOFF_NOTE, RESUME_NOTE
from tests.cli.conftest import Cli, wait_http_ok
from tests.cli.test_e2e import clean_env, dispatch_steered, worktrain_argv
from tests.cli.test_up_restart import redis_of, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(150)]

LEASE_SECONDS = 30.0  # the default lease: what a session not handed over waits for
STOP_SECONDS = 4.0  # `up` waits 6 s before it kills a tier; a hand-over takes well under that


def start_up(home: Path, tmp: Path, name: str, port: int, redis_port: int) -> subprocess.Popen[bytes]:
    env = clean_env(home, WORKTRAIN_DATA_DIR=str(home / ".worktrain"))
    argv = [*worktrain_argv(), "up", "--port", str(port), "--redis-port", str(redis_port)]
    argv += ["--workers", "1", "--fake-latency", "10"]
    out, err = (tmp / f"{name}.out").open("wb"), (tmp / f"{name}.err").open("wb")
    process = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err)
    wait_http_ok(f"http://127.0.0.1:{port}/readyz", process, timeout=60)
    wait_for(lambda: "WorkTrain is up." in (tmp / f"{name}.out").read_text(), "the banner", timeout=15)
    return process


def stop(process: subprocess.Popen[bytes]) -> float:
    started = time.monotonic()
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    return time.monotonic() - started


def test_ctrl_c_with_a_call_in_flight_hands_the_session_over_at_once(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    data_dir = home / ".worktrain"
    port, redis_port = free_port(), free_port()
    first = start_up(home, tmp_path, "up1", port, redis_port)
    second = None
    try:
        cli = Cli(f"http://127.0.0.1:{port}", token=None, env={"WORKTRAIN_DATA_DIR": str(data_dir)})
        sid = dispatch_steered(cli, tmp_path / "workspace")
        client = redis_of(data_dir)
        key = f"wt:session:{{{sid}}}"
        # turn 1's model call is under way (it answers after 10 s)
        wait_for(lambda: client.hget(key, "turnId") == "1", "turn 1 live")
        wait_for(lambda: "steer_delivered" in json.dumps(client.xrange(f"{key}:events")), "the call sent")
        client.close()
        took = stop(first)
        said = (tmp_path / "up1.out").read_text() + (tmp_path / "up1.err").read_text()
        print(f"up stopped in {took:.1f}s with turn 1's model call in flight")
        assert "killed it" not in said, said[-2000:]
        assert took < STOP_SECONDS + 2, f"up took {took:.1f}s to stop"

        second = start_up(home, tmp_path, "up2", port, redis_port)
        back = time.monotonic()
        client = redis_of(data_dir)
        wait_for(
            lambda: any(
                e.get("kind") == "session_resumed" for e in map(parse, client.xrange(f"{key}:events"))
            ),
            "the session resumed by the next up",
            timeout=60,
        )
        resumed_after = time.monotonic() - back
        print(f"resumed {resumed_after:.1f}s after the next up was ready")
        # a lease lapse would take 30 s (the default lease); the next worker's own start is in this
        assert resumed_after < LEASE_SECONDS / 2, (
            f"resumed only after {resumed_after:.1f}s: it waited for a lease"
        )
        # ground truth: the next request to the model says the session was handed over cleanly
        # (HANDOFF_NOTE), not that its worker died (RESUME_NOTE, after a lapsed lease)
        history = wait_for(
            lambda: [
                m
                for m in client.lrange(f"{key}:history", 0, -1)
                if "moved to another worker" in m or "was interrupted (its worker stopped)" in m
            ],
            "the resumed turn checkpointed",
            timeout=60,
        )
        assert HANDOFF_NOTE.split(":")[0] in history[-1] and RESUME_NOTE[:60] not in history[-1], history[-1][
            -600:
        ]
        kinds = [parse(entry).get("kind") for entry in client.xrange(f"{key}:events")]
        assert "turn_interrupted" in kinds, kinds
        client.close()
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                stop(process)


def parse(entry: tuple[str, dict[str, str]]) -> dict[str, Any]:
    _, fields = entry
    return dict(json.loads(fields[STREAM_FIELD]))
