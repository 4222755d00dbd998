"""Webhooks at the bus (README's Webhooks): deliveries queued by emit.lua with their event (never for a
refused attempt, once for one session_completed), taken and settled by a sender that POSTs
them to a real receiver on loopback, signed, with the same delivery id on every retry.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from daemon.bus.keys import Keys
from daemon.bus.outbox.webhooks import WebhookOutbox
from daemon.bus.scripts import EMIT
from daemon.bus.session.attemptevents import AttemptEvents
from daemon.bus.session.registry import NewSession, SessionRegistry
from daemon.bus.session.steerbus import SteerBus
from daemon.bus.streams.eventsink import EventSink
from daemon.host.clock import epoch_ms
from daemon.schema.events import CoordinatorSignal, IssueReported, SessionCompleted, TurnStarted
from daemon.schema.records import SessionStatus
from daemon.schema.webhookpayloads import (
    InvalidCallbackUrl,
    RetryPolicy,
    WebhookRouting,
    check_receiver_url,
    sign,
    verify,
)
from daemon.webhooks.sender import WebhookSender
from tests.tiers import fixture_tier
from tests.webhookreceiver import LOOPBACK_ALLOWED, Receiver

pytestmark = pytest.mark.unit

SECRET = "hook-secret"


@pytest.fixture
@fixture_tier("redis")
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.close()


def running(bus: SteerBus, registry: SessionRegistry, callback: str | None) -> tuple[str, Any]:
    sid = registry.create(
        NewSession(workflowId="wf", goal="Ship it\nmore", workspacePath="/tmp", callbackUrl=callback)
    )
    channel = bus.channel(sid, "w1", 30)
    channel.claim()
    return sid, channel


def outbox_of(client: redis.Redis, keys: Keys, urls: str = "") -> WebhookOutbox:
    return WebhookOutbox(client, keys, WebhookRouting.of(urls, "http://api.example"), 3600)


def test_a_finished_session_queues_one_session_finished_and_a_stale_attempt_none(
    real_redis: redis.Redis, keys: Keys
) -> None:
    bus = SteerBus(real_redis, keys, retention_seconds=3600)
    registry = SessionRegistry(real_redis, keys)
    outbox = outbox_of(real_redis, keys)
    sid, stale = running(bus, registry, "http://127.0.0.1:9/a")
    real_redis.delete(keys.session(sid).lease)  # w1 froze; its lease lapsed
    current = bus.channel(sid, "w2", 30)
    current.claim()
    sink = EventSink(real_redis, keys, None, webhooks=outbox)
    ending = SessionCompleted(sessionId=sid, status="completed", outcome="workflow_complete")
    AttemptEvents(sink, stale).emit(ending)  # the superseded attempt: refused, nothing queued
    assert outbox.of_session(sid) == [] and real_redis.zcard(keys.webhooks.due) == 0
    current.finish(SessionStatus.COMPLETED, "workflow_complete")
    AttemptEvents(sink, current).emit(TurnStarted(sessionId=sid, turnId=3), ending)
    AttemptEvents(sink, current).emit(ending)  # a second closing batch is refused
    [delivery] = outbox.of_session(sid)
    body = json.loads(delivery.body)
    assert (delivery.type, delivery.url, delivery.state) == (
        "session.finished",
        "http://127.0.0.1:9/a",
        "pending",
    )
    assert body["type"] == "session.finished" and body["id"] == delivery.id
    assert (body["sessionId"], body["workflowId"], body["goal"]) == (sid, "wf", "Ship it")
    assert (body["status"], body["outcome"]) == ("completed", "workflow_complete")
    assert set(body["usage"]) == {"inputTokens", "outputTokens", "cacheReadTokens", "cacheWriteTokens"}
    assert real_redis.zcard(keys.webhooks.due) == 1


def test_fleet_urls_and_the_callback_each_get_one_delivery_of_a_question_and_an_issue(
    real_redis: redis.Redis, keys: Keys
) -> None:
    bus = SteerBus(real_redis, keys, retention_seconds=3600)
    registry = SessionRegistry(real_redis, keys)
    outbox = outbox_of(real_redis, keys, "http://127.0.0.1:9/fleet, http://127.0.0.1:9/a")
    sid, channel = running(bus, registry, "http://127.0.0.1:9/a")
    sink = EventSink(real_redis, keys, None, webhooks=outbox)
    question = CoordinatorSignal(
        sessionId=sid, turnId=1, offset=1, signalKind="question", summary="Which DB?", wait=True
    )
    progress = CoordinatorSignal(sessionId=sid, turnId=1, offset=2, signalKind="progress", summary="half")
    issue = IssueReported(sessionId=sid, turnId=1, issueKind="blocked", severity="error", summary="no disk")
    AttemptEvents(sink, channel).emit(question, progress, issue)
    got = [(d.type, d.url) for d in outbox.of_session(sid)]
    assert got == [
        ("session.question", "http://127.0.0.1:9/a"),
        ("session.question", "http://127.0.0.1:9/fleet"),
        ("issue.reported", "http://127.0.0.1:9/a"),
        ("issue.reported", "http://127.0.0.1:9/fleet"),
    ]
    asked = json.loads(outbox.of_session(sid)[0].body)
    assert asked["question"]["summary"] == "Which DB?"
    assert asked["answer"]["url"] == f"http://api.example/api/v2/sessions/{sid}/steer"
    assert len({d.id for d in outbox.of_session(sid)}) == 4


def test_no_receiver_queues_nothing(real_redis: redis.Redis, keys: Keys) -> None:
    bus = SteerBus(real_redis, keys, retention_seconds=3600)
    sid, channel = running(bus, SessionRegistry(real_redis, keys), None)
    sink = EventSink(real_redis, keys, None, webhooks=outbox_of(real_redis, keys))
    AttemptEvents(sink, channel).emit(
        IssueReported(sessionId=sid, turnId=1, issueKind="blocked", severity="info", summary="s")
    )
    assert real_redis.zcard(keys.webhooks.due) == 0
    assert len(real_redis.xrange(keys.session(sid).events)) == 1


def queue_one(real_redis: redis.Redis, keys: Keys, url: str) -> tuple[WebhookOutbox, str]:
    bus = SteerBus(real_redis, keys, retention_seconds=3600)
    outbox = outbox_of(real_redis, keys)
    sid, channel = running(bus, SessionRegistry(real_redis, keys), url)
    channel.finish(SessionStatus.FAILED, "max_turns")
    sink = EventSink(real_redis, keys, None, webhooks=outbox)
    AttemptEvents(sink, channel).emit(SessionCompleted(sessionId=sid, status="failed", outcome="max_turns"))
    return outbox, sid


def drain(sender: WebhookSender, outbox: WebhookOutbox, until: float) -> None:
    """Run the sender's ticks in this thread until nothing is due and nothing pending, or `until`."""
    while time.monotonic() < until and outbox.pending_count():
        sender.tick()
        time.sleep(0.05)


def test_a_500_is_retried_with_the_same_id_and_body_and_a_2xx_stops_it(
    real_redis: redis.Redis, keys: Keys, receiver: Receiver
) -> None:
    outbox, sid = queue_one(real_redis, keys, receiver.url)
    receiver.answers = [500, 503, 302]  # a redirect is not followed: an answer like the others
    policy = RetryPolicy(base_seconds=0.05, max_seconds=0.2)
    sender = WebhookSender(
        outbox, EventSink(real_redis, keys, None), policy, secret=SECRET, receivers=LOOPBACK_ALLOWED
    )
    drain(sender, outbox, time.monotonic() + 20)
    time.sleep(0.5)
    sender.tick()
    time.sleep(0.3)
    with receiver.lock:
        requests = list(receiver.requests)
    assert len(requests) == 4, [h.get("x-worktrain-delivery") for _, h, _ in requests]
    ids = {h["x-worktrain-delivery"] for _, h, _ in requests}
    assert len(ids) == 1 and {body for _, _, body in requests} == {requests[0][2]}
    for _, headers, body in requests:
        assert headers["x-worktrain-event"] == "session.finished"
        assert verify(SECRET, body, headers["x-worktrain-signature"])
    [delivery] = outbox.of_session(sid)
    assert (delivery.state, delivery.attempts, delivery.lastStatus) == ("delivered", 4, 200)
    assert delivery.responseExcerpt is not None and len(delivery.responseExcerpt) <= 512
    assert json.loads(requests[0][2])["id"] == delivery.id


def test_a_refused_connection_retries_until_the_give_up_then_webhook_failed(
    real_redis: redis.Redis, keys: Keys
) -> None:
    outbox, sid = queue_one(real_redis, keys, "http://127.0.0.1:9/closed")  # port 9: nothing listens
    policy = RetryPolicy(base_seconds=0.05, max_seconds=0.1, give_up_seconds=0.6)
    sender = WebhookSender(outbox, EventSink(real_redis, keys, None), policy, receivers=LOOPBACK_ALLOWED)
    drain(sender, outbox, time.monotonic() + 20)
    [delivery] = outbox.of_session(sid)
    assert delivery.state == "failed" and delivery.attempts >= 2 and delivery.lastStatus is None
    assert "Connection" in (delivery.lastError or "")
    assert [d.id for d in outbox.recent(failed=True)] == [delivery.id]
    failed = [json.loads(f["data"]) for _, f in real_redis.xrange(keys.events)]
    assert [(e["kind"], e["deliveryId"]) for e in failed if e["kind"] == "webhook_failed"] == [
        ("webhook_failed", delivery.id)
    ]


def test_a_claimed_delivery_is_due_again_when_its_sender_dies(real_redis: redis.Redis, keys: Keys) -> None:
    outbox, sid = queue_one(real_redis, keys, "http://127.0.0.1:9/x")
    now = epoch_ms()
    assert len(outbox.claim(now, 1000, 10)) == 1
    assert outbox.claim(now + 500, 1000, 10) == []  # held by its sender
    assert [d.sessionId for d in outbox.claim(now + 1001, 1000, 10)] == [sid]  # it died: again


def test_signatures_and_receiver_urls() -> None:
    body = b'{"type":"session.finished"}'
    assert sign("k", body) == "sha256=" + __import__("hmac").new(b"k", body, "sha256").hexdigest()
    assert verify("k", body, sign("k", body)) and not verify("k", body + b" ", sign("k", body))
    for bad in (
        "ftp://h/x",
        "file:///etc/passwd",
        "javascript:alert(1)",
        "http://",
        "/relative",
        "http://a b",
    ):
        with pytest.raises(InvalidCallbackUrl):
            check_receiver_url(bad)
    assert check_receiver_url("https://h.example:8443/p?q=1") == "https://h.example:8443/p?q=1"


def test_backoff_doubles_to_the_cap_with_jitter() -> None:
    policy = RetryPolicy()
    rng = random.Random(7)
    delays = [policy.delay(n, rng) for n in range(1, 16)]
    assert 0.5 <= delays[0] <= 1.0 and 1.0 <= delays[1] <= 2.0
    assert all(1800 <= d <= 3600 for d in delays[12:])
    assert len({round(policy.delay(3, rng), 6) for _ in range(20)}) > 1  # jittered


def test_emit_run_twice_with_the_same_arguments_queues_each_delivery_once(
    real_redis: redis.Redis, keys: Keys
) -> None:
    """A lost reply retried: the second run carries the same delivery ids (docs/redis.md)."""
    bus = SteerBus(real_redis, keys, retention_seconds=3600)
    outbox = outbox_of(real_redis, keys)
    sid, channel = running(bus, SessionRegistry(real_redis, keys), "http://127.0.0.1:9/a")
    issue = IssueReported(sessionId=sid, turnId=1, issueKind="blocked", severity="warn", summary="s")
    queued, extra = outbox.queue_for(sid, [issue])
    args = channel.fenced_args(queued, issue.model_dump_json())
    for _ in range(2):
        assert bus.scripts.run(EMIT, keys.session(sid), args, extra_keys=extra) is None  # {'ok'}
    assert len(outbox.of_session(sid)) == 1 and real_redis.zcard(keys.webhooks.due) == 1
