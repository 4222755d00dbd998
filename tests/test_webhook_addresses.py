"""Issue 40, item 4: webhook receivers were an oracle of the workers' own network.

A token holder's `callbackUrl` (or a fleet URL) named loopback, the cloud metadata address,
a private network, in any spelling the C library reads (`2130706433`, `0x7f.1`, `[::1]`),
and the sender POSTed there; a service that answered something else than HTTP had its first
line stored as `lastError` and shown by `worktrain webhooks`. Here: the address policy
itself (daemon/host/receiveraddresses.py), then the real sender against real listeners on
loopback — which must receive nothing unless the operator allows it — a resolver that
rebinds, and listeners that are not HTTP servers."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
import redis

from daemon.bus.keys import Keys
from daemon.bus.outbox.webhooks import WebhookDelivery, WebhookOutbox
from daemon.bus.session.attemptevents import AttemptEvents
from daemon.bus.session.registry import NewSession, SessionRegistry
from daemon.bus.session.steerbus import SteerBus
from daemon.bus.streams.eventsink import EventSink
from daemon.host.config import ConfigError, load_settings
from daemon.host.receiveraddresses import (
    ReceiverNotAllowed,
    ReceiverPolicy,
    allowed_addresses,
    kind_of,
    url_refusal,
)
from daemon.schema.events import SessionCompleted
from daemon.schema.records import SessionStatus
from daemon.schema.webhookpayloads import RetryPolicy, WebhookRouting
from daemon.webhooks import sender as sender_module
from daemon.webhooks.sender import WebhookSender, post
from tests.webhookreceiver import LOOPBACK_ALLOWED, Receiver

pytestmark = pytest.mark.redis

DEFAULT = ReceiverPolicy()
ANY_PRIVATE = ReceiverPolicy(allow_private=True)

# Each spelling of a non-public receiver: (host as written in a URL, what it is)
NOT_PUBLIC = [
    ("127.0.0.1", "loopback"),
    ("127.9.9.9", "loopback"),
    ("localhost", "loopback"),
    ("LOCALHOST.", "loopback"),
    ("app.localhost", "loopback"),
    ("[::1]", "loopback"),
    ("2130706433", "loopback"),  # 127.0.0.1 as one number
    ("0x7f.1", "loopback"),
    ("0x7f000001", "loopback"),
    ("0177.0.0.1", "loopback"),  # octal
    ("127.1", "loopback"),
    ("0.0.0.0", "unspecified"),
    ("[::]", "unspecified"),
    ("169.254.169.254", "link-local"),  # the cloud metadata service
    ("[fe80::1]", "link-local"),
    ("10.1.2.3", "private"),
    ("172.16.0.1", "private"),
    ("172.31.255.255", "private"),
    ("192.168.1.1", "private"),
    ("100.64.0.1", "reserved"),  # shared address space (carrier-grade NAT)
    ("[fc00::1]", "unique-local"),
    ("[fd12:3456::1]", "unique-local"),
    ("[fec0::1]", "site-local"),
    ("224.0.0.1", "multicast"),
    ("[ff02::1]", "multicast"),
    ("[::ffff:127.0.0.1]", "loopback"),  # IPv4-mapped IPv6
    ("[::ffff:7f00:1]", "loopback"),
    ("[::ffff:169.254.169.254]", "link-local"),
    ("[::ffff:10.0.0.1]", "private"),
    ("[64:ff9b::a00:1]", "private"),  # NAT64 of 10.0.0.1
    ("[2002:7f00:1::]", "loopback"),  # 6to4 of 127.0.0.1
    ("[2002:c0a8:101::]", "private"),  # 6to4 of 192.168.1.1
    ("240.0.0.1", "private"),
    ("255.255.255.255", "private"),
]
PUBLIC = ["8.8.8.8", "[2606:4700::1111]", "[::ffff:8.8.8.8]", "[64:ff9b::808:808]", "1.1.1.1"]


@pytest.mark.parametrize(("host", "kind"), NOT_PUBLIC)
def test_each_non_public_spelling_is_refused_by_default_and_allowed_when_the_operator_says(
    host: str, kind: str
) -> None:
    url = f"http://{host}:8080/hook"
    why = url_refusal(url, DEFAULT)
    assert why is not None and kind in why, (url, why)
    assert url_refusal(url, ANY_PRIVATE) is None
    if host.lower().rstrip(".").endswith("localhost"):
        return  # a name: its addresses are checked once resolved (below, and in the sender)
    # what the C library makes of it is what the sender checks and connects to
    [address] = {info[4][0] for info in socket.getaddrinfo(host.strip("[]"), 80, type=socket.SOCK_STREAM)}
    assert kind_of(ipaddress.ip_address(address)) == kind, (host, address)
    with pytest.raises(ReceiverNotAllowed):
        allowed_addresses(host.strip("[]"), 80, DEFAULT)
    assert allowed_addresses(host.strip("[]"), 80, ANY_PRIVATE)


@pytest.mark.parametrize("host", PUBLIC)
def test_public_addresses_and_names_pass(host: str) -> None:
    assert url_refusal(f"https://{host}/hook", DEFAULT) is None
    assert url_refusal("https://hooks.example.com/x", DEFAULT) is None  # judged once resolved


def test_an_allowed_network_allows_its_addresses_and_nothing_else() -> None:
    policy = ReceiverPolicy.of(False, "127.0.0.1/32, 10.0.0.0/8,fd00::/8")
    for url in ("http://127.0.0.1/", "http://2130706433/", "http://[::ffff:127.0.0.1]/", "http://10.2.3.4/"):
        assert url_refusal(url, policy) is None, url
    assert url_refusal("http://localhost/", policy) is None  # 127.0.0.1 is allowed
    assert url_refusal("http://[fd00::5]/", policy) is None
    for url in ("http://127.0.0.2/", "http://[::1]/", "http://169.254.169.254/", "http://192.168.0.1/"):
        assert url_refusal(url, policy) is not None, url
    with pytest.raises(ValueError, match=r"'10\.0\.0\.0/33'"):
        ReceiverPolicy.of(False, "127.0.0.1,10.0.0.0/33")


def test_the_fleet_urls_are_checked_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKTRAIN_WEBHOOK_URLS", "https://hooks.example.com/a, http://0x7f.1:6379/")
    with pytest.raises(ConfigError) as refused:
        load_settings()
    assert "WORKTRAIN_WEBHOOK_URLS" in str(refused.value) and "loopback" in str(refused.value)
    monkeypatch.setenv("WORKTRAIN_WEBHOOK_ALLOW_NETWORKS", "127.0.0.0/8")
    assert load_settings().webhook_receivers.networks == (ipaddress.ip_network("127.0.0.0/8"),)
    monkeypatch.setenv("WORKTRAIN_WEBHOOK_ALLOW_NETWORKS", "not-a-network")
    with pytest.raises(ConfigError, match="WORKTRAIN_WEBHOOK_ALLOW_NETWORKS"):
        load_settings()


# ---- the real sender ---------------------------------------------------------------------


def delivery_to(url: str) -> WebhookDelivery:
    body = json.dumps({"type": "session.finished", "id": "whd_1", "sessionId": "sess_x"})
    return WebhookDelivery(
        id="whd_1", type="session.finished", url=url, sessionId="sess_x", body=body, createdAt="", createdMs=0
    )


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.close()


def test_the_sender_posts_nothing_to_loopback_in_any_spelling(receiver: Receiver) -> None:
    """Every spelling of the receiver's own address, POSTed by the sender as it runs in a
    worker: nothing arrives; with the operator's allow, every one arrives."""
    spellings = [
        "127.0.0.1",
        "localhost",
        "2130706433",
        "0x7f.1",
        "0177.0.0.1",
        "127.1",
        "[::ffff:127.0.0.1]",
    ]
    for host in spellings:
        outcome = post(delivery_to(f"http://{host}:{receiver.port}/hook"), None, 5.0, DEFAULT)
        assert (outcome.status, outcome.error) == (None, sender_module.NOT_ALLOWED), host
    assert receiver.received() == []
    for host in spellings[:-1]:  # the v4-mapped one needs an IPv6 socket the receiver has not
        outcome = post(delivery_to(f"http://{host}:{receiver.port}/hook"), None, 5.0, LOOPBACK_ALLOWED)
        assert outcome.status == 200, (host, outcome)
    assert len(receiver.received()) == len(spellings) - 1


@pytest.mark.processes  # openssl makes the receiver's certificate
def test_https_checks_the_name_on_the_connection_to_the_checked_address(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection goes to the address the sender checked, TLS still verifies the
    certificate against the URL's name (a certificate for another name fails), and the
    Host header says the name."""
    if shutil.which("openssl") is None:
        pytest.skip("no openssl to make a certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # the sender's default context trusts it
    server = HTTPServer(("127.0.0.1", 0), HostEcho)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = server.server_address[1]
    try:
        good = post(delivery_to(f"https://localhost:{port}/hook"), None, 5.0, LOOPBACK_ALLOWED)
        other_name = post(delivery_to(f"https://127.0.0.1:{port}/hook"), None, 5.0, LOOPBACK_ALLOWED)
    finally:
        server.shutdown()
        server.server_close()
    assert (good.status, good.excerpt) == (201, f"host=localhost:{port}"), good
    assert other_name.status is None and "CERTIFICATE_VERIFY_FAILED" in (other_name.error or ""), other_name


class HostEcho(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(201)
        self.end_headers()
        self.wfile.write(f"host={self.headers['Host']}".encode())

    def log_message(self, *args: Any) -> None:
        return None


def queued(real_redis: redis.Redis, keys: Keys, url: str) -> tuple[WebhookOutbox, str]:
    """A failed session whose session.finished is queued for `url`, as a worker queues it."""
    bus = SteerBus(real_redis, keys, retention_seconds=3600)
    outbox = WebhookOutbox(real_redis, keys, WebhookRouting(), 3600)
    registry = SessionRegistry(real_redis, keys)
    sid = registry.create(NewSession(workflowId="wf", goal="g", workspacePath="/tmp", callbackUrl=url))
    channel = bus.channel(sid, "w1", 30)
    channel.claim()
    channel.finish(SessionStatus.FAILED, "max_turns")
    sink = EventSink(real_redis, keys, None, webhooks=outbox)
    AttemptEvents(sink, channel).emit(SessionCompleted(sessionId=sid, status="failed", outcome="max_turns"))
    return outbox, sid


def test_a_refused_receiver_is_a_failed_try_that_says_why_and_names_nothing(
    real_redis: redis.Redis, keys: Keys, receiver: Receiver
) -> None:
    """Through WebhookSender (a name that resolves to loopback): the record says the address
    is not allowed — not which address a name resolved to — and is tried again later."""
    outbox, sid = queued(real_redis, keys, f"http://localhost:{receiver.port}/hook")
    sender = WebhookSender(outbox, EventSink(real_redis, keys, None), RetryPolicy())
    [delivery] = outbox.claim(2**62, 15_000, 1)
    assert sender.send(delivery) == "retry"
    [settled] = outbox.of_session(sid)
    assert settled.state == "pending" and settled.lastError == sender_module.NOT_ALLOWED
    assert "127.0.0.1" not in real_redis.hget(keys.webhooks.deliveries, settled.id)  # type: ignore[operator]
    assert receiver.received() == []


# ---- DNS rebinding -------------------------------------------------------------------------

PUBLIC_ADDRESS = "93.184.215.14"  # never contacted: the guard below refuses every non-loopback connect


class Rebinding:
    """A resolver for the attacker's name: `answers` in turn (the last one again after)."""

    def __init__(self, port: int, answers: list[list[str]]) -> None:
        self.port, self.answers, self.calls = port, answers, 0

    def __call__(self, host: Any, port: Any, *args: Any, **kwargs: Any) -> list[tuple[Any, ...]]:
        if host != "rebind.example":
            return socket_getaddrinfo(host, port, *args, **kwargs)
        answer = self.answers[min(self.calls, len(self.answers) - 1)]
        self.calls += 1
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port)) for address in answer]


socket_getaddrinfo = socket.getaddrinfo


@pytest.fixture
def connects(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every address a socket of this test's thread connects to; only loopback is really
    reached (the rest is refused here, so no test traffic leaves this machine). Other threads'
    connections are not counted: an earlier test's client in this xdist process (a Sentinel
    watcher reaching 127.0.0.3) may still be winding down."""
    seen: list[str] = []
    real = socket.socket
    owner = threading.get_ident()

    class Guarded(real):  # type: ignore[misc,valid-type]
        def connect(self, address: Any) -> None:
            if isinstance(address, tuple):
                if threading.get_ident() == owner:
                    seen.append(str(address[0]))
                if not ipaddress.ip_address(str(address[0])).is_loopback:
                    raise ConnectionRefusedError(111, "refused by the test (only loopback is reached)")
            super().connect(address)

    monkeypatch.setattr(socket, "socket", Guarded)
    return seen


@pytest.mark.parametrize(
    "answers",
    [
        [[PUBLIC_ADDRESS, "127.0.0.1"]],  # one answer: a public address first, loopback second
        [[PUBLIC_ADDRESS], ["127.0.0.1"]],  # a public answer to the check, loopback to the next lookup
    ],
    ids=["one-answer", "rebinding"],
)
def test_a_name_that_also_or_later_resolves_to_loopback_never_reaches_it(
    receiver: Receiver, connects: list[str], monkeypatch: pytest.MonkeyPatch, answers: list[list[str]]
) -> None:
    resolver = Rebinding(receiver.port, answers)
    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    outcome = sender_module.post(
        delivery_to(f"http://rebind.example:{receiver.port}/hook"), None, 5.0, DEFAULT
    )
    assert outcome.status is None, outcome
    assert connects == [PUBLIC_ADDRESS] and resolver.calls == 1, (connects, resolver.calls)
    assert receiver.received() == []


# ---- a listener that is not an HTTP server -------------------------------------------------


class Banner:
    """A TCP listener on loopback that writes `banner` to whoever connects, then reads."""

    def __init__(self, banner: bytes) -> None:
        self.banner = banner
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.2)
        self.port = self.server.getsockname()[1]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.sendall(self.banner)
                conn.settimeout(1.0)
                with contextlib.suppress(OSError):  # it closes, or says nothing more
                    conn.recv(65536)

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.server.close()


@pytest.mark.parametrize(
    "banner",
    [b"SSH-2.0-OpenSSH_9.2\r\n", b"-ERR unknown command 'POST'\r\n", b"\x00\x01\x02secret-ish\xff\r\n"],
    ids=["ssh", "redis", "binary"],
)
def test_a_reply_that_is_not_http_is_recorded_as_such_never_its_bytes(
    real_redis: redis.Redis, keys: Keys, banner: bytes
) -> None:
    listener = Banner(banner)
    try:
        outbox, sid = queued(real_redis, keys, f"http://127.0.0.1:{listener.port}/hook")
        sender = WebhookSender(
            outbox, EventSink(real_redis, keys, None), RetryPolicy(), receivers=LOOPBACK_ALLOWED
        )
        [delivery] = outbox.claim(2**62, 15_000, 1)
        assert sender.send(delivery) == "retry"
    finally:
        listener.close()
    [settled] = outbox.of_session(sid)
    assert (settled.lastStatus, settled.lastError, settled.responseExcerpt) == (
        None,
        "not an HTTP response",
        None,
    )
    stored = real_redis.hget(keys.webhooks.deliveries, settled.id)
    assert isinstance(stored, str)
    for fragment in ("SSH-2.0", "OpenSSH", "ERR unknown", "secret-ish", "\\u0000"):
        assert fragment not in stored, stored
