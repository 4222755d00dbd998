"""A real `worktrain web` under the attacks of issue 21 that need no sandbox escape: another
local process sharing its port (H1), guessable tokens (L4), long-held requests taking every
thread (M2) and half-sent bodies (granian has no body read timeout)."""

from __future__ import annotations

import errno
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from daemon.bus.keys import Keys
from daemon.bus.session.steerbus import SteerBus
from daemon.host.embedded_redis import RedisServer, free_port
from tests.web.conftest import TOKEN
from tests.web.test_server import WORKTRAIN, env_for, stop_tree
from tests.web.test_server_trust import Web, new_session, start

pytestmark = pytest.mark.e2e

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def run_web(tmp_path: Path, redis_url: str, port: int, **env: str) -> subprocess.CompletedProcess[str]:
    """`worktrain web` expected to refuse to start: its exit and what it said (one that starts
    anyway is stopped, workers included, after 30 s: the test then fails on its exit code)."""
    argv = [str(WORKTRAIN), "web", "--port", str(port), "--workers", "1"]
    process = subprocess.Popen(
        argv,
        env=env_for(redis_url, tmp_path, **env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        stop_tree(process)  # type: ignore[arg-type]
        out, err = process.communicate()
    return subprocess.CompletedProcess(argv, process.returncode, out, err)


def reuseport_socket(host: str = "127.0.0.1") -> socket.socket:
    """What the agent's Bash did: a socket that asks to share a port (SO_REUSEPORT)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    return sock


# ---- H1: the web server owns its port alone -------------------------------------------------


def test_worktrain_web_refuses_a_port_another_process_listens_on(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    port = free_port()
    squatter = reuseport_socket()
    squatter.bind(("127.0.0.1", port))
    squatter.listen()
    try:
        result = run_web(tmp_path, redis_server.url, port, WORKTRAIN_API_TOKEN=TOKEN)
    finally:
        squatter.close()
    assert result.returncode != 0
    assert f"port {port} on 127.0.0.1 is already in use" in result.stderr, result.stderr[-2000:]


@pytest.fixture
def token_web(redis_server: RedisServer, tmp_path: Path) -> Iterator[Web]:
    yield from start(tmp_path, redis_server.url, "--workers", "2", WORKTRAIN_API_TOKEN=TOKEN)


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"])
def test_no_other_socket_can_join_the_running_servers_port(token_web: Web, host: str) -> None:
    for make in (reuseport_socket, lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM)):
        sock = make()
        try:
            with pytest.raises(OSError) as refused:
                sock.bind((host, token_web.port))
            assert refused.value.errno == errno.EADDRINUSE
        finally:
            sock.close()
    # ... so every authenticated request reaches WorkTrain (the finding: 11 of 30 did not).
    statuses = [token_web.call("GET", "/api/v2/sessions", headers=AUTH)[0] for _ in range(30)]
    assert statuses == [200] * 30


# ---- L4: guessable tokens --------------------------------------------------------------------

GUESSABLE = [
    "abcdefghijklmnopqrstuvwxyz0123456789",  # 36: one sequence
    "passwordpasswordpasswordpassword1234",  # 36: a word, repeated, and a count
    "worktrain-token-0123456789abcdefghij",  # 36: words and sequences
    "aaaabbbbccccddddeeeeffffgggghhhh12",  # 34: runs
    "qwertyqwertyqwertyqwertyqwerty1234",  # 34: a keyboard word, repeated
    "Tr0ub4dor&3Tr0ub4dor&3Tr0ub4dor&3xy",  # 35: one stretch, three times
]


@pytest.mark.parametrize("token", GUESSABLE)
def test_worktrain_web_refuses_a_guessable_token(
    redis_server: RedisServer, tmp_path: Path, token: str
) -> None:
    result = run_web(tmp_path, redis_server.url, free_port(), WORKTRAIN_API_TOKEN=token)
    assert result.returncode != 0
    assert "WORKTRAIN_API_TOKEN is too weak" in result.stderr and "entropy" in result.stderr, result.stderr
    assert token not in result.stderr + result.stdout  # the refusal does not echo the secret


# ---- M2: long-held requests never take every thread -------------------------------------------


def hold(web: Web, path: str, count: int) -> list[socket.socket]:
    """`count` requests that the server may hold (streams, receipt waits), left open."""
    held = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", web.port))
        sock.sendall(
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n\r\n".encode()
        )
        held.append(sock)
    return held


def pending_steer(redis_url: str) -> str:
    sid = new_session(redis_url)
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        SteerBus(client, Keys("wt")).accept(sid, "wait for me")
    finally:
        client.close()
    return sid


def test_streams_and_receipt_waits_leave_readyz_reads_and_steers_served(
    token_web: Web, redis_server: RedisServer
) -> None:
    sid = pending_steer(redis_server.url)
    # The finding's load: 14 SSE streams and 14 receipt waits of 60 s, on 2 x 8 threads.
    held = hold(token_web, f"/api/v2/sessions/{sid}/events", 14)
    held += hold(token_web, f"/api/v2/sessions/{sid}/steers/1?wait=60", 14)
    try:
        time.sleep(1.0)  # every one of them is in a thread, or refused, by now
        for _ in range(10):  # each process answers, whichever gets the connection
            assert token_web.call("GET", "/readyz", timeout=5)[0] == 200
            assert token_web.call("GET", f"/api/v2/sessions/{sid}", headers=AUTH, timeout=5)[0] == 200
            steer = token_web.call(
                "POST", f"/api/v2/sessions/{sid}/steer", {"text": "still here"}, AUTH, timeout=5
            )
            assert steer[0] == 200, steer
        answers = [s.recv(64) for s in held if _answered(s)]  # streams answer their headers at once
        assert {line[:12] for line in answers} == {b"HTTP/1.1 200", b"HTTP/1.1 503"}  # over the budget: 503
    finally:
        for sock in held:
            sock.close()


def _answered(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return bool(sock.recv(1, socket.MSG_PEEK))
    except BlockingIOError:
        return False
    finally:
        sock.setblocking(True)


# ---- half-sent bodies (granian reads a body with no timeout) ----------------------------------


def half_bodies(web: Web, path: str, count: int, headers: str) -> list[socket.socket]:
    """`count` requests announcing 100 bytes of JSON and sending 4, then nothing."""
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{headers}"
        'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"te'
    )
    return [web.raw(head.encode()) for _ in range(count)]


def test_half_sent_bodies_without_the_token_hold_no_thread(token_web: Web, redis_server: RedisServer) -> None:
    """The finding: 12 of 20 threads held for 42 s+ by bodies that never finished, and steers
    answered 503. A body is read only after the token check: an agent without the token
    holds a thread for no longer than it takes to answer 401."""
    sid = new_session(redis_server.url)
    stalled = half_bodies(token_web, f"/api/v2/sessions/{sid}/steer", 20, "")
    stalled += half_bodies(token_web, "/api/v2/auto/dispatch", 20, "Authorization: Bearer wrong\r\n")
    try:
        time.sleep(0.5)
        for sock in stalled:
            sock.settimeout(10)
            assert sock.recv(64).startswith(b"HTTP/1.1 401")  # answered without the body
        for _ in range(10):
            steer = token_web.call("POST", f"/api/v2/sessions/{sid}/steer", {"text": "x"}, AUTH, timeout=5)
            assert steer[0] == 200, steer
            assert token_web.call("GET", "/readyz", timeout=5)[0] == 200
    finally:
        for sock in stalled:
            sock.close()


def test_half_sent_bodies_with_the_token_leave_readyz_and_reads_served(
    token_web: Web, redis_server: RedisServer
) -> None:
    """A token holder's stalled bodies take at most the thread budget's pool (web/threadbudget.py):
    two threads of each process stay free for /readyz and reads."""
    sid = new_session(redis_server.url)
    stalled = half_bodies(
        token_web, f"/api/v2/sessions/{sid}/steer", 20, f"Authorization: Bearer {TOKEN}\r\n"
    )
    try:
        time.sleep(1.0)
        for _ in range(10):
            assert token_web.call("GET", "/readyz", timeout=5)[0] == 200
            assert token_web.call("GET", f"/api/v2/sessions/{sid}", headers=AUTH, timeout=5)[0] == 200
    finally:
        for sock in stalled:
            sock.close()
