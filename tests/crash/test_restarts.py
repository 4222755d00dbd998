"""Redis and the web tier die and come back mid-session: nothing accepted is lost (docs/durability.md).

Redis runs with `appendfsync always` here: every write is on disk before Redis answers, so
even SIGKILL loses nothing that was acknowledged (with the default `everysec`, up to about a
second of acknowledged writes can be lost: docs/durability.md).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from daemon.host.embedded_redis import free_port
from tests.crash.coordinator import Coordinator, verify
from tests.crash.harness import STEPS, Stack, pid_of_worker, wait_until

pytestmark = pytest.mark.e2e


def live_before_last_step(stack: Stack) -> Callable[[str], bool]:
    def check(sid: str) -> bool:
        try:
            record = stack.record(sid)
        except redis.RedisError:  # Redis is down: keep steering, the answers say 503
            return True
        live = record.get("status") in ("queued", "running", "waiting")
        return live and int(record.get("stepIndex") or 0) < STEPS - 1

    return check


def assert_every_accepted_steer_once(stack: Stack, sid: str, coordinator: Coordinator) -> None:
    record = stack.wait_finished(sid, timeout=60)
    assert (record["status"], record["outcome"]) == ("completed", "workflow_complete"), record
    verdict = verify(stack, sid, coordinator.accepted[sid])
    print(
        f"steers accepted={len(coordinator.accepted[sid])} lost={verdict.lost} "
        f"duplicated={verdict.duplicated} undelivered={verdict.undelivered}"
    )
    assert (verdict.lost, verdict.duplicated, verdict.disordered) == (0, 0, 0), verdict.problems


def steer_accepted_mirrored(stack: Stack, sid: str, offset: int) -> bool:
    assert stack.client is not None
    entries: Any = stack.client.xrange("wt:events")
    for _, fields in entries:
        event = json.loads(fields["data"])
        if event["kind"] == "steer_accepted" and event["sessionId"] == sid and event["offset"] == offset:
            return True
    return False


def renewed(client: redis.Redis, key: str) -> Callable[[], bool]:
    """A probe that is true once the key's PTTL went up between two readings: a renewal (it
    only goes down otherwise; a key gone, PTTL -2, and made again by another claim is not
    one). Not `PTTL > the first reading`: that reading is often taken just after a beat (ttl
    4,995 of 5,000 ms), and a later beat's reading then beats it only when sampled within
    those 5 ms of the beat (a CI run, and 1 run in 12 here, waited the whole lease through
    five renewals)."""
    last = [client.pttl(key)]

    def probe() -> bool:
        now = client.pttl(key)
        went_up, last[0] = last[0] >= 0 and now > last[0], now
        return bool(went_up)

    return probe


def test_redis_killed_and_restarted_mid_session(make_stack: Callable[..., Stack]) -> None:
    lease = 5.0
    stack = make_stack(lease_seconds=lease, appendfsync="always")
    stack.model.hold_when = lambda sid, n: n in (2, 3)
    stack.start(workers=1, processes=2, redis_port=free_port())
    assert stack.redis_server is not None and stack.client is not None
    sid = stack.dispatch()
    coordinator = Coordinator(stack, should_steer=live_before_last_step(stack), every=0.05)
    coordinator.sessions.append(sid)
    coordinator.start()
    try:
        wait_until(lambda: stack.model.held(sid), "turn 2's model call", timeout=30)
        horse = stack.record(sid)["worker"]
        stack.redis_server.kill()  # SIGKILL: with appendfsync always, nothing acknowledged is lost
        down_at = time.monotonic()
        stack.model.release(sid)  # the turn goes on into the outage: its writes wait for Redis
        wait_until(lambda: stack.ready() == 503, "/readyz to say 503", timeout=5)
        wait_until(lambda: coordinator.unavailable, "a steer answered 503", timeout=5)
        time.sleep(max(1.0 - (time.monotonic() - down_at), 0))
        stack.redis_server.start()  # same port, same dir: the AOF is loaded
        print(f"Redis was down {time.monotonic() - down_at:.1f}s")
        wait_until(lambda: stack.ready() == 200, "/readyz to say 200 again", timeout=10)

        # the session carries on in the same horse: its heartbeat thread renews the lease
        wait_until(lambda: stack.model.held(sid), "turn 3's model call", timeout=30)
        assert stack.record(sid)["worker"] == horse, "the session was resumed: the lease lapsed"
        key = f"wt:session:{{{sid}}}:lease"
        wait_until(renewed(stack.client, key), "the heartbeat to renew the lease", lease)
        # the web's event mirror thread is still at work
        answer = coordinator.steer_once(sid)
        wait_until(
            lambda: steer_accepted_mirrored(stack, sid, answer.body["steer"]["offset"]),
            "steer_accepted in wt:events",
            timeout=5,
        )
        # the reaper and the RQ workers outlived the outage too: a horse killed now is resumed
        stack.horses.add(pid_of_worker(horse))
        os.kill(pid_of_worker(horse), signal.SIGKILL)
        wait_until(lambda: stack.record(sid).get("attempt") == "2", "the reaper's resume", lease + 10)
        stack.model.release(sid)
        assert_every_accepted_steer_once(stack, sid, coordinator)
    finally:
        coordinator.stop()
    retry_after = {answer.headers.get("retry-after") for answer in coordinator.unavailable}
    codes = {answer.body.get("code") for answer in coordinator.unavailable}
    print(f"steers answered 503 while Redis was down: {len(coordinator.unavailable)}")
    assert codes == {"steer_bus_unavailable"} and None not in retry_after, (codes, retry_after)
    kinds = [e["kind"] for e in stack.events(sid)]
    assert "session_resumed" in kinds


def test_web_killed_and_restarted_while_a_coordinator_posts(make_stack: Callable[..., Stack]) -> None:
    messages = 40
    stack = make_stack()
    stack.model.hold_when = lambda sid, n: n == 2
    stack.start(workers=1)
    sid = stack.dispatch()
    wait_until(lambda: stack.model.held(sid), "turn 2's model call", timeout=30)
    coordinator = Coordinator(stack)
    sent: list[str] = []

    def post_all() -> None:
        for _ in range(messages):
            text, client_msg_id = coordinator.next_message(sid)
            coordinator.post(sid, text, client_msg_id)  # retried until 200
            sent.append(text)
            time.sleep(0.02)

    poster = threading.Thread(target=post_all, name="poster", daemon=True)
    poster.start()
    wait_until(lambda: len(sent) >= 10, "the first steers", timeout=30)
    stack.proc("web").kill_tree(signal.SIGKILL)
    time.sleep(0.5)
    stack.start_web()  # same port
    poster.join(60)
    assert not poster.is_alive() and len(sent) == messages
    print(
        f"while the web tier was down: {coordinator.no_answer} tries without an answer, "
        f"{coordinator.statuses.count('duplicate')} retries answered `duplicate`"
    )
    assert coordinator.no_answer > 0

    journal = [entry for entry in stack.journal(sid) if entry["type"] == "accepted"]
    assert sorted(entry["text"] for entry in journal) == sorted(sent)  # each exactly once
    assert len({entry["clientMsgId"] for entry in journal}) == messages
    stack.model.release(sid)
    assert_every_accepted_steer_once(stack, sid, coordinator)
    assert len(coordinator.accepted[sid]) == messages
