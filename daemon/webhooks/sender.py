"""The webhook sender (README's Webhooks): one per worker process, never on a session's thread.

A loop thread takes the deliveries due now (daemon.bus.outbox.webhooks.WebhookOutbox.claim, every
`poll_seconds`: the first try comes within a poll of the event) and hands each to a small
pool of its own threads, which POST it and settle the result:

- 2xx: delivered;
- anything else (3xx included: redirects are not followed), a timeout (10 s), a refused or
  broken connection: tried again after the policy's delay (1 s doubling to 1 h, jittered),
  until 24 h after the event, then given up with a `webhook_failed` event.

The body is the stored one, byte for byte; with `WORKTRAIN_WEBHOOK_SECRET` it is signed
(`X-WorkTrain-Signature`). Only the start of the receiver's answer is read and kept
(EXCERPT_BYTES). A slow receiver holds a sender thread, never a session.

Where it connects (issue 40, item 4; daemon/host/receiveraddresses.py): the receiver's host
is resolved once, only the addresses the operator's policy allows are kept (public ones by
default), and the connection goes to one of those — the name is never resolved again, so
no DNS answer that changes in between (rebinding) reaches loopback or a private network. A
receiver none of whose addresses is allowed is a failed try like a refused connection, and
its record says only that (the worker's log names the addresses). A reply that is not HTTP
(an SSH banner, Redis' error) is recorded as NOT_HTTP, never its bytes.

A delivery of a type in `posters` is not POSTed as it is: its poster makes the try (a
trigger's report-back comment, README's Triggers: daemon/triggers/reportback.py) and says
how it went; the retries and the settling are the same. A `trigger.comment` no poster here
takes is left for a later try (another worker may have the trigger's token).
"""

from __future__ import annotations

import http.client
import logging
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

import redis

from daemon.bus.fleet.metrics import NULL_RECORDER, WEBHOOK_DELIVERIES, WEBHOOK_LATENCY, MetricsRecorder
from daemon.bus.outbox.webhooks import WebhookDelivery, WebhookOutbox
from daemon.bus.streams.eventsink import EventSink
from daemon.host.clock import epoch_ms, utc_now_iso
from daemon.host.receiveraddresses import (
    HOW_TO_ALLOW,
    ReceiverNotAllowed,
    ReceiverPolicy,
    SockAddr,
    allowed_addresses,
)
from daemon.schema.events import WebhookFailed
from daemon.schema.webhookpayloads import COMMENT_TYPE, RetryPolicy, headers, succeeded

log = logging.getLogger(__name__)

EXCERPT_BYTES = 512
POLL_SECONDS = 0.25
SEND_THREADS = 4
PRUNE_EVERY_SECONDS = 600.0
Result = Literal["delivered", "retry", "failed"]
NOT_HTTP = "not an HTTP response"
CLOSED = "the receiver closed the connection without a response"
NOT_ALLOWED = (
    f"the receiver's address is not allowed (loopback, private or another non-public address: {HOW_TO_ALLOW})"
)


@dataclass(frozen=True, slots=True)
class TryOutcome:
    status: int | None
    error: str | None
    excerpt: str | None


class _PinnedConnection(http.client.HTTPConnection):
    """Connects to addresses already resolved and checked, never to the host's name: the
    Host header (and TLS's server name) still say the name."""

    addresses: Sequence[tuple[int, SockAddr]] = ()

    def connect(self) -> None:
        self.sock = _connect_first(self.addresses, self.timeout)


class _PinnedHTTPSConnection(http.client.HTTPSConnection, _PinnedConnection):
    """HTTPS's `connect` wraps what its parent's makes: here, _PinnedConnection's socket."""


def _connect_first(addresses: Sequence[tuple[int, SockAddr]], timeout: float | None) -> socket.socket:
    """A TCP connection to the first of `addresses` that answers (the last error otherwise)."""
    last = OSError("no address to connect to")
    for family, sockaddr in addresses:
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect(sockaddr)
        except OSError as exc:
            sock.close()
            last = exc
            continue
        return sock
    raise last


def post(
    delivery: WebhookDelivery,
    secret: str | None,
    timeout: float,
    receivers: ReceiverPolicy,
) -> TryOutcome:
    """One POST of the stored body to an address `receivers` allows; the answer's status and
    the start of its body. The standard library's http.client: it never follows a redirect
    (a 3xx is an answer like any other non-2xx), and `timeout` bounds the connect and every
    read."""
    body = delivery.body.encode()
    url = urlsplit(delivery.url)
    https = url.scheme == "https"
    host = url.hostname or ""
    try:
        port = url.port or (443 if https else 80)  # always given: http.client would read `::1` as host:port
        addresses = allowed_addresses(host, port, receivers)  # resolved once, here
    except ReceiverNotAllowed as why:
        log.warning("webhook %s to %s refused: %s (%s)", delivery.id, delivery.url, why, HOW_TO_ALLOW)
        return TryOutcome(None, NOT_ALLOWED, None)
    except (OSError, ValueError) as exc:  # no answer for the name (gaierror), a port out of range
        return TryOutcome(None, f"{type(exc).__name__}: {exc}"[:300], None)
    connection = (_PinnedHTTPSConnection if https else _PinnedConnection)(host, port, timeout=timeout)
    connection.addresses = addresses
    path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    try:
        connection.request("POST", path, body=body, headers=headers(delivery.type, delivery.id, body, secret))
        try:
            response = connection.getresponse()
        except http.client.RemoteDisconnected:
            return TryOutcome(None, CLOSED, None)
        except http.client.HTTPException:  # its message quotes what the peer sent: never kept
            return TryOutcome(None, NOT_HTTP, None)
        excerpt = response.read(EXCERPT_BYTES).decode(errors="replace")
        return TryOutcome(response.status, None, excerpt or None)
    except TimeoutError as exc:
        return TryOutcome(None, f"timeout after {timeout:g} s: {exc}"[:300], None)
    except (OSError, http.client.HTTPException) as exc:
        return TryOutcome(None, f"{type(exc).__name__}: {exc}"[:300], None)
    finally:
        connection.close()


Poster = Callable[[WebhookDelivery, float], TryOutcome]  # one try of a delivery, with its timeout


def unposted(delivery: WebhookDelivery, timeout: float) -> TryOutcome:
    return TryOutcome(None, "no poster for this delivery in this process (no such trigger here)", None)


class WebhookSender:
    """Takes due deliveries from Redis and POSTs them, until `stop()`."""

    def __init__(
        self,
        outbox: WebhookOutbox,
        events: EventSink,
        policy: RetryPolicy | None = None,
        secret: str | None = None,
        metrics: MetricsRecorder = NULL_RECORDER,
        poll_seconds: float = POLL_SECONDS,
        threads: int = SEND_THREADS,
        posters: Mapping[str, Poster] | None = None,
        receivers: ReceiverPolicy | None = None,
    ) -> None:
        self.outbox = outbox
        self.posters = {COMMENT_TYPE: unposted, **(posters or {})}
        self.receivers = receivers or ReceiverPolicy()  # public addresses only, unless allowed
        self.events = events
        self.policy = policy or RetryPolicy()
        self.secret = secret
        self.metrics = metrics
        self.poll_seconds = poll_seconds
        self.threads = threads
        self.stopped = threading.Event()
        self._busy = threading.Semaphore(threads)
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="webhook-send")
        self._thread = threading.Thread(target=self._run, name="webhook-sender", daemon=True)
        self._last_prune = 0.0

    def start(self) -> WebhookSender:
        self._thread.start()
        return self

    def stop(self, timeout: float = 2.0) -> None:
        """Stops taking deliveries; a try in flight is left to finish (its claim runs out if
        the process ends first: another sender tries again)."""
        self.stopped.set()
        self._thread.join(timeout)
        self._pool.shutdown(wait=False, cancel_futures=True)

    # --- the loop ----------------------------------------------------------------------

    def _run(self) -> None:
        while not self.stopped.is_set():
            try:
                self.tick()
            except redis.RedisError as exc:  # Redis down or restarting: the next tick retries
                log.warning("webhook sender: %s", exc)
                self.stopped.wait(1.0)
            except Exception:  # the thread must outlive any bug in one tick
                log.exception("webhook sender tick failed")
                self.stopped.wait(1.0)
            self.stopped.wait(self.poll_seconds)

    def tick(self) -> int:
        """Take as many due deliveries as there are free send threads; returns how many."""
        free = 0
        while free < self.threads and self._busy.acquire(blocking=False):
            free += 1
        if not free:
            return 0
        claim_ms = int((self.policy.timeout_seconds + 5) * 1000)
        try:
            taken = self.outbox.claim(epoch_ms(), claim_ms, free)
        except BaseException:
            for _ in range(free):
                self._busy.release()
            raise
        for _ in range(free - len(taken)):
            self._busy.release()
        for delivery in taken:
            self._pool.submit(self._send_and_release, delivery)
        self._maybe_prune()
        return len(taken)

    def _maybe_prune(self) -> None:
        now = epoch_ms() / 1000
        if now - self._last_prune >= PRUNE_EVERY_SECONDS:
            self._last_prune = now
            pruned = self.outbox.prune(epoch_ms())
            if pruned:
                log.info("webhook deliveries pruned: %d older than the retention period", pruned)

    def _send_and_release(self, delivery: WebhookDelivery) -> None:
        try:
            self.send(delivery)
        except redis.RedisError as exc:  # settle lost: the claim runs out, it is tried again
            log.warning("webhook %s: result not recorded: %s", delivery.id, exc)
        except Exception:
            log.exception("webhook %s: send failed", delivery.id)
        finally:
            self._busy.release()

    # --- one try -----------------------------------------------------------------------

    def send(self, delivery: WebhookDelivery) -> Result:
        poster = self.posters.get(delivery.type)
        if poster is not None:
            outcome = poster(delivery, self.policy.timeout_seconds)
        else:
            outcome = post(delivery, self.secret, self.policy.timeout_seconds, self.receivers)
        now = epoch_ms()
        attempts = delivery.attempts + 1
        result: Result
        at_ms = now
        wait = self.policy.delay(attempts)
        if succeeded(outcome.status):
            result = "delivered"
        elif (now - delivery.createdMs) / 1000 + wait > self.policy.give_up_seconds:
            result = "failed"  # the next try would come after the 24 h
        else:
            result = "retry"
            at_ms = now + int(wait * 1000)
        settled = delivery.model_copy(
            update={
                "attempts": attempts,
                "state": {"delivered": "delivered", "retry": "pending", "failed": "failed"}[result],
                "lastAttemptAt": utc_now_iso(),
                "lastStatus": outcome.status,
                "lastError": outcome.error,
                "responseExcerpt": outcome.excerpt,
                "deliveredAt": utc_now_iso() if result == "delivered" else None,
                "failedAt": utc_now_iso() if result == "failed" else None,
            }
        )
        if not self.outbox.settle(settled, result, at_ms):
            return result
        self.metrics.count(WEBHOOK_DELIVERIES, event=delivery.type, result=result)
        if result == "delivered":
            self.metrics.observe(WEBHOOK_LATENCY, (now - delivery.createdMs) / 1000)
        elif result == "failed":
            self._report_failed(settled)
        else:
            log.info(
                "webhook %s to %s: try %d failed (%s); again in %.1f s",
                delivery.id,
                delivery.url,
                attempts,
                outcome.status or outcome.error,
                (at_ms - now) / 1000,
            )
        return result

    def _report_failed(self, delivery: WebhookDelivery) -> None:
        log.warning("webhook %s to %s given up after %d tries", delivery.id, delivery.url, delivery.attempts)
        failed = WebhookFailed(
            sessionId=delivery.sessionId,
            deliveryId=delivery.id,
            event=delivery.type,
            url=delivery.url,
            attempts=delivery.attempts,
            lastStatus=delivery.lastStatus,
            lastError=delivery.lastError,
        )
        self.events.write([failed], session_streams=False)
