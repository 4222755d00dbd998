"""The real `worktrain web` (gunicorn, started through the console script) over a real socket."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from daemon.host.embedded_redis import RedisServer, free_port
from tests.leftovers import stop_tree
from tests.web.conftest import FIXTURE_WORKFLOWS

pytestmark = pytest.mark.e2e

WORKTRAIN = Path(sys.executable).with_name("worktrain")


def env_for(redis_url: str, data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKTRAIN_")}
    return {
        **env,
        "REDIS_URL": redis_url,
        "WORKTRAIN_DATA_DIR": str(data_dir),
        "WORKTRAIN_WORKFLOWS_DIR": str(FIXTURE_WORKFLOWS),
        **extra,
    }


def request(port: int, method: str, path: str, body: Any = None) -> tuple[int, dict[str, Any]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        payload = None if body is None else json.dumps(body).encode()
        declared = payload is not None or method in ("POST", "PATCH", "DELETE")  # state changes are JSON
        headers = {"Content-Type": "application/json"} if declared else {}
        conn.request(method, path, body=payload, headers=headers)
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def wait_ready(process: subprocess.Popen[bytes], port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"worktrain web exited with {process.returncode}")
        try:
            if request(port, "GET", "/readyz")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError("worktrain web did not become ready")


@pytest.fixture(params=["granian", "gunicorn"])
def server(
    request: pytest.FixtureRequest, redis_server: RedisServer, tmp_path: Path
) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    port = free_port()
    log = (tmp_path / "web.log").open("wb")
    argv = ["web", "--server", request.param, "--port", str(port), "--workers", "2", "--threads", "2"]
    process = subprocess.Popen(
        [str(WORKTRAIN), *argv],
        env=env_for(redis_server.url, tmp_path),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_ready(process, port)
        yield process, port
    finally:
        stop_tree(process)
        log.close()


def test_dispatch_and_steer_over_a_real_socket(server, real_redis) -> None:  # type: ignore[no-untyped-def]
    process, port = server
    status, body = request(
        port,
        "POST",
        "/api/v2/auto/dispatch",
        {"workflowId": "two-step", "goal": "g", "workspacePath": "/tmp/ws"},
    )
    assert status == 202
    sid = body["data"]["sessionId"]
    assert real_redis.lrange("rq:queue:worktrain", 0, -1) == [sid]
    status, body = request(
        port, "POST", f"/api/v2/sessions/{sid}/steer", {"text": "steer me", "clientMsgId": "c1"}
    )
    assert (status, body["status"], body["steer"]["offset"]) == (200, "accepted", 1)
    assert (
        request(port, "POST", f"/api/v2/sessions/{sid}/steer", {"text": "steer me", "clientMsgId": "c1"})[1][
            "status"
        ]
        == "duplicate"
    )
    status, body = request(port, "GET", f"/api/v2/sessions/{sid}")
    assert (status, body["data"]["pendingSteers"]) == (200, 1)
    assert request(port, "GET", "/api/v2/nope") == (
        404,
        {"success": False, "code": "not_found", "error": "No such route."},
    )
    assert request(port, "POST", f"/api/v2/sessions/{sid}/cancel")[0] == 202
    kinds = sse_kinds(port, sid)
    assert kinds == ["session_queued", "steer_accepted", "steer_undelivered", "session_completed"]
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=15) == 0


def sse_kinds(port: int, sid: str) -> list[str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", f"/api/v2/sessions/{sid}/events")
        response = conn.getresponse()
        assert response.status == 200
        assert response.getheader("Content-Type", "").startswith("text/event-stream")
        text = response.read().decode()  # the stream ends by itself after session_completed
    finally:
        conn.close()
    return [line.split(": ", 1)[1] for line in text.splitlines() if line.startswith("event: ")]


def test_refuses_a_public_bind_without_a_token(redis_server: RedisServer, tmp_path: Path) -> None:
    result = subprocess.run(
        [str(WORKTRAIN), "web", "--bind", "0.0.0.0", "--port", str(free_port())],
        env=env_for(redis_server.url, tmp_path),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=30,
    )
    assert result.returncode != 0
    assert b"WORKTRAIN_API_TOKEN" in result.stderr


def test_env_bind_is_checked_too(redis_server: RedisServer, tmp_path: Path) -> None:
    result = subprocess.run(
        [str(WORKTRAIN), "web", "--port", str(free_port())],
        env=env_for(redis_server.url, tmp_path, WORKTRAIN_BIND="0.0.0.0"),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=30,
    )
    assert result.returncode != 0 and b"refusing" in result.stderr
