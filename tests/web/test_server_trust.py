"""A real `worktrain web` under attack (issue 10, findings 4, 5, 6, 9, 10): a rebinding Host,
weak tokens, bind addresses that used to crash granian, a chunked body over the limit, a
non-ASCII Last-Event-ID, clients that stop sending halfway, too many event streams."""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from cli.procs import descendants
from daemon.bus.keys import Keys
from daemon.bus.session.registry import NewSession, SessionRegistry
from daemon.host.embedded_redis import RedisServer, free_port
from tests.agent.procscan import environ_and_cmdline
from tests.leftovers import stop_tree
from tests.web.conftest import TOKEN
from tests.web.test_server import WORKTRAIN, env_for, wait_ready

pytestmark = pytest.mark.e2e


class Web:
    def __init__(self, process: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.process, self.port, self.log = process, port, log

    def call(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None,
             timeout: float = 10.0) -> tuple[int, dict[str, Any], dict[str, str]]:  # fmt: skip
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            payload = None if body is None else json.dumps(body).encode()
            declared = payload is not None or method in ("POST", "PATCH", "DELETE")  # state changes are JSON
            sent = {"Content-Type": "application/json"} if declared else {}
            conn.request(method, path, body=payload, headers={**sent, **(headers or {})})
            response = conn.getresponse()
            return response.status, json.loads(response.read() or b"{}"), dict(response.getheaders())
        finally:
            conn.close()

    def raw(self, data: bytes) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port))
        sock.sendall(data)
        return sock


def start(tmp_path: Path, redis_url: str, *args: str, **env: str) -> Iterator[Web]:
    port = free_port()
    log_path = tmp_path / f"web-{port}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [str(WORKTRAIN), "web", "--port", str(port), *args],
            env=env_for(redis_url, tmp_path, **env),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_ready(process, port)
        yield Web(process, port, log_path)
    finally:
        stop_tree(process)  # the server and its workers, not the parent alone


@pytest.fixture
def open_web(redis_server: RedisServer, tmp_path: Path) -> Iterator[Web]:
    yield from start(tmp_path, redis_server.url, "--workers", "1", "--threads", "4")


def new_session(redis_url: str) -> str:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        return SessionRegistry(client, Keys("wt")).create(
            NewSession(workflowId="two-step", goal="g", workspacePath="/tmp", stepCount=2)
        )
    finally:
        client.close()


def test_a_rebinding_host_is_refused_by_the_running_server(open_web: Web, redis_server: RedisServer) -> None:
    evil = {"Host": "rebind.attacker.example:3456"}
    dispatch = {"workflowId": "two-step", "goal": "g", "workspacePath": "/tmp/ws"}
    status, body, _ = open_web.call("POST", "/api/v2/auto/dispatch", dispatch, evil)
    assert (status, body["code"]) == (403, "forbidden_host")  # the finding: 202
    sid = new_session(redis_server.url)
    status, body, _ = open_web.call("POST", f"/api/v2/sessions/{sid}/steer", {"text": "x"}, evil)
    assert (status, body["code"]) == (403, "forbidden_host")
    assert open_web.call("POST", "/api/v2/auto/dispatch", dispatch)[0] == 202  # 127.0.0.1 as Host


@pytest.mark.parametrize("token", ["change-me", "a"])
def test_weak_tokens_stop_the_server_before_it_listens(
    redis_server: RedisServer, tmp_path: Path, token: str
) -> None:
    done = subprocess.run(
        [str(WORKTRAIN), "web", "--bind", "0.0.0.0", "--port", str(free_port())],
        env=env_for(redis_server.url, tmp_path, WORKTRAIN_API_TOKEN=token),
        capture_output=True,
        timeout=30,
    )
    assert done.returncode != 0 and b"too weak" in done.stderr and b"Traceback" not in done.stderr


@pytest.mark.parametrize("bind", [" 127.0.0.1", "::1%lo", "not-an-address"])
def test_unusable_bind_addresses_are_a_sentence_not_a_traceback(
    redis_server: RedisServer, tmp_path: Path, bind: str
) -> None:
    done = subprocess.run(
        [str(WORKTRAIN), "web", "--bind", bind, "--port", str(free_port())],
        env=env_for(redis_server.url, tmp_path),
        capture_output=True,
        timeout=30,
    )
    assert done.returncode != 0 and b"--bind" in done.stderr and b"Traceback" not in done.stderr


def test_bind_localhost_serves(redis_server: RedisServer, tmp_path: Path) -> None:
    for web in start(tmp_path, redis_server.url, "--bind", "localhost", "--workers", "1"):
        assert web.call("GET", "/api/v2/workflows")[0] == 200


def test_a_chunked_body_over_the_limit_is_413(open_web: Web, redis_server: RedisServer) -> None:
    sid = new_session(redis_server.url)
    body = b'{"text": "' + b"x" * (2 * 1024 * 1024) + b'"}'
    chunks = b"".join(
        b"%x\r\n%s\r\n" % (len(body[i : i + 65536]), body[i : i + 65536]) for i in range(0, len(body), 65536)
    )
    head = (
        f"POST /api/v2/sessions/{sid}/steer HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    )
    sock = open_web.raw(head.encode() + b"Transfer-Encoding: chunked\r\n\r\n")
    sock.settimeout(10)
    with contextlib.suppress(OSError):  # the server may answer and close before taking it all
        sock.sendall(chunks + b"0\r\n\r\n")
    assert sock.recv(64).startswith(b"HTTP/1.1 413")


def test_a_non_ascii_last_event_id_is_400_not_a_replay(open_web: Web, redis_server: RedisServer) -> None:
    sid = new_session(redis_server.url)
    request = f"GET /api/v2/sessions/{sid}/events HTTP/1.1\r\nHost: 127.0.0.1\r\nLast-Event-ID: ١٢٣\r\n\r\n"
    sock = open_web.raw(request.encode())
    sock.settimeout(10)
    assert sock.recv(64).startswith(b"HTTP/1.1 400")


def _stalled_steers(web: Web, sid: str, count: int) -> list[socket.socket]:
    head = (
        f"POST /api/v2/sessions/{sid}/steer HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n"
        'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"te'
    )
    return [web.raw(head.encode()) for _ in range(count)]


@pytest.mark.parametrize("server", ["granian", "gunicorn"])
def test_clients_that_stop_sending_do_not_stop_the_server(
    redis_server: RedisServer, tmp_path: Path, server: str
) -> None:
    sid = new_session(redis_server.url)
    for web in start(tmp_path, redis_server.url, "--server", server, "--workers", "1", "--threads", "4",
                     WORKTRAIN_API_TOKEN=TOKEN, WORKTRAIN_READ_TIMEOUT_SECONDS="1"):  # fmt: skip
        stalled = _stalled_steers(web, sid, 6)
        stalled += [web.raw(b"GET /api/v2/sessions HTTP/1.1\r\nHost: 127.") for _ in range(6)]
        time.sleep(0.3)
        started = time.monotonic()
        status, _, _ = web.call(
            "GET", "/api/v2/sessions", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
        )
        assert status == 200 and time.monotonic() - started < 20  # the finding: never answered
        # It re-executed itself without the token in its environment (finding 2), workers too.
        tree = [web.process.pid, *(p.pid for p in descendants(web.process.pid))]
        assert len(tree) >= 2 and all(TOKEN.encode() not in environ_and_cmdline(pid) for pid in tree)
        for sock in stalled:
            sock.close()


def test_event_streams_are_capped_per_process(redis_server: RedisServer, tmp_path: Path) -> None:
    sid = new_session(redis_server.url)
    for web in start(tmp_path, redis_server.url, "--workers", "1", "--threads", "2"):  # one stream allowed
        first = web.raw(f"GET /api/v2/sessions/{sid}/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        first.settimeout(10)
        assert first.recv(64).startswith(b"HTTP/1.1 200")
        status, body, headers = web.call("GET", f"/api/v2/sessions/{sid}/events")
        assert (status, body["code"]) == (503, "too_many_streams") and headers.get("retry-after")
        first.close()  # the server notices at its next keep-alive and frees the slot
        deadline = time.monotonic() + 15
        while True:
            again = web.raw(f"GET /api/v2/sessions/{sid}/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
            again.settimeout(10)
            status_line = again.recv(64)
            again.close()
            if status_line.startswith(b"HTTP/1.1 200"):
                break
            assert time.monotonic() < deadline, "the stream's slot was never released"
            time.sleep(0.5)
