"""Webhooks end to end (README's Webhooks): real stacks (redis-server, `worktrain web`, `worktrain worker`,
the fake model answering by the session's goal), real receivers on loopback.

A session's end reaches its callbackUrl (and the fleet-wide receiver) within 2 s, signed; a
500 is retried with the same delivery id until a 2xx; a question arrives as
session.question and answering it where the payload says resumes the session; a receiver
down for a minute, with a kill -9 of every WorkTrain process (and Redis) in between, gets
the delivery afterwards; a session finished once is told once.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import pytest

from daemon.host.embedded_redis import free_port
from daemon.schema.webhookpayloads import verify
from tests.crash.harness import ROOT, TOKEN, WORKTRAIN, Stack, pid_of_worker, stacks, wait_until
from tests.e2e.test_subagents_e2e import ONE_STEP, CoordModel, child, goal
from tests.webhookreceiver import ALLOW_LOOPBACK_ENV, Receiver

pytestmark = pytest.mark.e2e

SECRET = "a-webhook-secret-for-the-tests"
FAST_RETRIES = {
    "WORKTRAIN_WEBHOOK_SECRET": SECRET,
    "WORKTRAIN_WEBHOOK_BACKOFF_SECONDS": "0.2",  # the production default is 1 s doubling to 1 h
    "WORKTRAIN_WEBHOOK_BACKOFF_MAX_SECONDS": "2",
}


@pytest.fixture(scope="module")
def fleet_receiver() -> Iterator[Receiver]:
    receiver = Receiver()
    yield receiver
    receiver.close()


@pytest.fixture(scope="module")
def hooked(tmp_path_factory: pytest.TempPathFactory, fleet_receiver: Receiver) -> Iterator[Stack]:
    factory = stacks(tmp_path_factory.mktemp("webhooks"), Stack)
    stack = next(factory)(
        model=CoordModel(latency=0.01),
        idle_wait_seconds=30.0,
        concurrency=4,
        extra_env={**FAST_RETRIES, **ALLOW_LOOPBACK_ENV, "WORKTRAIN_WEBHOOK_URLS": fleet_receiver.url},
    )
    (stack.tmp / "workflows" / "one-step.json").write_text(json.dumps(ONE_STEP))
    stack.start(workers=1, processes=2)
    try:
        yield stack
    finally:
        next(factory, None)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.close()


def dispatch(stack: Stack, callback: str | None, **wants: Any) -> str:
    body: dict[str, Any] = {
        "workflowId": "one-step",
        "goal": goal(**wants),
        "workspacePath": str(stack.workspace),
    }
    if callback is not None:
        body["callbackUrl"] = callback
    answer = stack.http("POST", "/api/v2/auto/dispatch", body)
    assert answer.status == 202, answer
    return str(answer.body["data"]["sessionId"])


def arrived(receiver: Receiver, sid: str, kind: str, count: int = 1, timeout: float = 30.0) -> list[Any]:
    return list(
        wait_until(
            lambda: (got := receiver.received(sid, kind)) and len(got) >= count and got,
            f"{count} {kind} of {sid} at {receiver.url}",
            timeout,
        )
    )


def event_time(stack: Stack, sid: str, kind: str) -> float:
    [event] = stack.events_of(sid, kind)
    return datetime.fromisoformat(event["ts"]).timestamp()


def test_a_sessions_end_reaches_its_callback_and_the_fleet_receiver_within_2s_signed(
    hooked: Stack, receiver: Receiver, fleet_receiver: Receiver
) -> None:
    sid = dispatch(hooked, receiver.url, notes="All done.")
    assert hooked.wait_finished(sid)["status"] == "completed"
    [(at, headers, body)] = arrived(receiver, sid, "session.finished")
    assert at - event_time(hooked, sid, "session_completed") < 2.0
    assert verify(SECRET, body, headers["x-worktrain-signature"])
    payload = json.loads(body)
    assert headers["x-worktrain-delivery"] == payload["id"] and payload["id"].startswith("whd_")
    assert (payload["type"], payload["sessionId"], payload["workflowId"]) == (
        "session.finished",
        sid,
        "one-step",
    )
    assert (payload["status"], payload["outcome"]) == ("completed", "workflow_complete")
    assert payload["goal"].startswith("fake:") and payload["usage"]["inputTokens"] >= 0
    [(_, fleet_headers, fleet_body)] = arrived(fleet_receiver, sid, "session.finished")
    assert verify(SECRET, fleet_body, fleet_headers["x-worktrain-signature"])
    assert json.loads(fleet_body)["id"] != payload["id"]  # one delivery per receiver
    time.sleep(1.5)  # a session finished once is told once (per receiver)
    assert len(receiver.received(sid)) == 1 and len(fleet_receiver.received(sid, "session.finished")) == 1
    deliveries = hooked.http("GET", f"/api/v2/sessions/{sid}/webhooks").body["data"]["deliveries"]
    assert sorted((d["url"], d["state"], d["attempts"]) for d in deliveries) == sorted(
        [(receiver.url, "delivered", 1), (fleet_receiver.url, "delivered", 1)]
    )
    assert all("body" not in d for d in deliveries)


def test_a_500_is_retried_with_the_same_delivery_id_and_a_2xx_stops_the_retries(
    hooked: Stack, receiver: Receiver
) -> None:
    receiver.answers = [500, 500, 500]
    sid = dispatch(hooked, receiver.url, notes="Fails to be heard three times.")
    hooked.wait_finished(sid)
    tries = arrived(receiver, sid, "session.finished", count=4)
    time.sleep(3.0)  # longer than the capped backoff: nothing more comes after the 200
    tries = receiver.received(sid, "session.finished")
    assert len(tries) == 4
    assert len({h["x-worktrain-delivery"] for _, h, _ in tries}) == 1
    assert len({body for _, _, body in tries}) == 1  # the same bytes, the same signature
    assert all(verify(SECRET, body, h["x-worktrain-signature"]) for _, h, body in tries)
    deliveries = hooked.http("GET", f"/api/v2/sessions/{sid}/webhooks").body["data"]["deliveries"]
    [delivery] = [d for d in deliveries if d["url"] == receiver.url]
    assert (delivery["state"], delivery["attempts"], delivery["lastStatus"]) == ("delivered", 4, 200)
    listed = subprocess.run(
        [*WORKTRAIN, "webhooks", "--url", hooked.url, "--token", TOKEN],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert delivery["id"] in listed.stdout and "delivered" in listed.stdout


def test_a_question_arrives_as_session_question_and_the_reply_resumes_the_session(
    hooked: Stack, receiver: Receiver
) -> None:
    sid = dispatch(hooked, receiver.url, ask="Which database should I use?")
    [(_, headers, body)] = arrived(receiver, sid, "session.question")
    assert verify(SECRET, body, headers["x-worktrain-signature"])
    question = json.loads(body)
    assert question["question"]["summary"] == "Which database should I use?"
    assert question["question"]["kind"] == "question"
    answer = question["answer"]
    path = urlsplit(answer["url"]).path
    assert path == f"/api/v2/sessions/{sid}/steer" and answer["method"] == "POST"
    replied = hooked.http("POST", path, {"text": "Use Postgres."})  # what a coordinator does
    assert replied.status == 200, replied
    assert hooked.wait_finished(sid)["status"] == "completed"
    asked = hooked.model.requests_of(sid)[1]  # the request after the question carries the answer
    assert "Use Postgres." in json.dumps(asked["messages"][-1])
    [(_, _, finished)] = arrived(receiver, sid, "session.finished")
    assert json.loads(finished)["status"] == "completed"


def test_a_reported_issue_arrives_as_issue_reported(hooked: Stack, receiver: Receiver) -> None:
    sid = dispatch(hooked, receiver.url, fatal="The disk is full.")
    assert hooked.wait_finished(sid)["status"] == "failed"
    [(_, headers, body)] = arrived(receiver, sid, "issue.reported")
    assert verify(SECRET, body, headers["x-worktrain-signature"])
    issue = json.loads(body)["issue"]
    assert (issue["severity"], issue["kind"], issue["summary"]) == ("fatal", "blocked", "The disk is full.")
    [(_, _, finished)] = arrived(receiver, sid, "session.finished")
    assert json.loads(finished)["status"] == "failed"


def test_a_child_inherits_its_parents_callback_url(hooked: Stack, receiver: Receiver) -> None:
    parent = dispatch(hooked, receiver.url, spawn=[child(notes="Child work.")], single=True)
    assert hooked.wait_finished(parent)["status"] == "completed"
    [kid] = hooked.http("GET", f"/api/v2/sessions/{parent}").body["data"]["children"]
    kid_id = kid["sessionId"]
    assert hooked.record(kid_id)["callbackUrl"] == receiver.url
    [(_, _, body)] = arrived(receiver, kid_id, "session.finished")
    assert json.loads(body)["parentSessionId"] == parent
    arrived(receiver, parent, "session.finished")


BACKOFF_MAX = 2  # tries 0.2, 0.4, 0.8, 1.6, then every 2 s: several refused before the kill
DOWN_SECONDS = 4 * BACKOFF_MAX


def test_a_receiver_down_through_a_kill_9_of_everything_gets_the_delivery(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The receiver refuses for DOWN_SECONDS (four times the backoff's cap: tries keep
    failing, then WorkTrain and Redis are killed -9 in the middle of it); once everything is
    back, the same delivery (its id) arrives once, signed."""
    factory = stacks(tmp_path_factory.mktemp("webhooks-down"), Stack)
    stack = next(factory)(
        model=CoordModel(latency=0.01), appendfsync="always", idle_wait_seconds=30.0, concurrency=4,
        extra_env={
            **FAST_RETRIES, **ALLOW_LOOPBACK_ENV, "WORKTRAIN_WEBHOOK_BACKOFF_MAX_SECONDS": str(BACKOFF_MAX),
        },
    )  # fmt: skip
    (stack.tmp / "workflows" / "one-step.json").write_text(json.dumps(ONE_STEP))
    port = free_port()  # nothing listens there for DOWN_SECONDS: every try is refused
    url = f"http://127.0.0.1:{port}/hook"
    down_at = time.monotonic()
    try:
        stack.start(workers=1, processes=2)
        sid = dispatch(stack, url, notes="Nobody hears this yet.")
        stack.wait_finished(sid)
        assert stack.client is not None
        hooks = "wt:{webhooks}:deliveries"

        def tried_twice() -> dict[str, Any] | None:
            [raw] = stack.client.hvals(hooks) or [None]  # type: ignore[union-attr]
            record = json.loads(raw) if raw else None
            return record if record and record["attempts"] >= 2 else None

        before = wait_until(tried_twice, "two refused tries", 30)
        assert before["state"] == "pending" and "Connection" in before["lastError"]
        for proc in stack.procs:  # kill -9 of every WorkTrain process, and of Redis
            proc.kill_tree()
        assert stack.redis_server is not None
        stack.redis_server.kill()
        time.sleep(max(0.0, DOWN_SECONDS - (time.monotonic() - down_at)))
        receiver = Receiver(port=port)  # the receiver is back
        try:
            stack.redis_server.start()  # same port, same dir: the AOF is loaded
            stack.start_tiers(workers=1, processes=1)
            [(_, headers, body)] = arrived(receiver, sid, "session.finished", timeout=30)
            assert headers["x-worktrain-delivery"] == before["id"]  # the same delivery, not a new one
            assert verify(SECRET, body, headers["x-worktrain-signature"])
            time.sleep(1.0)
            assert len(receiver.received(sid)) == 1
        finally:
            receiver.close()
    finally:
        next(factory, None)


def test_a_superseded_attempt_sends_no_webhook(tmp_path_factory: pytest.TempPathFactory) -> None:
    """A worker frozen mid-turn past its lease while another completes the session, then
    thawed with its model call answered: only the attempt that finished tells the receiver."""
    factory = stacks(tmp_path_factory.mktemp("webhooks-fenced"), Stack)
    receiver = Receiver()
    stack = next(factory)(lease_seconds=2.0, extra_env={**FAST_RETRIES, **ALLOW_LOOPBACK_ENV})
    try:
        stack.start(workers=1)
        stack.model.hold_when = lambda sid, n: n == 2  # turn 2's model call stays open
        body = {"workflowId": "crash-four", "goal": "g", "workspacePath": str(stack.workspace)}
        body["callbackUrl"] = receiver.url
        answer = stack.http("POST", "/api/v2/auto/dispatch", body)
        sid = str(answer.body["data"]["sessionId"])
        wait_until(lambda: stack.model.held(sid), "turn 2's model call", 30)
        frozen = stack.proc("worker1")
        horse = pid_of_worker(stack.record(sid)["worker"])
        stack.freeze(frozen, horse)
        stack.start_worker("worker2")
        wait_until(lambda: stack.record(sid).get("attempt") == "2", "worker2 to take the session over", 30)
        stack.model.release(sid)  # (the new attempt's turn 2 is not held: n counts per session)
        stack.wait_finished(sid)
        arrived(receiver, sid, "session.finished")
        stack.thaw(frozen, horse)  # its turn 2 reply arrives now: every write of it is refused
        wait_until(lambda: f"{sid} attempt 1 fenced" in frozen.log(), "the thawed worker to be fenced", 30)
        time.sleep(2.0)
        finished = receiver.received(sid, "session.finished")
        assert len(finished) == 1, [json.loads(b) for _, _, b in finished]
        assert stack.client is not None
        assert stack.client.llen(f"wt:session:{{{sid}}}:webhooks") == 1
    finally:
        receiver.close()
        next(factory, None)
