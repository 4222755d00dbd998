"""API weather, end to end (docs/DEVELOPING.md): `worktrain worker` processes against the fake model
answering 529, 529, 429, 503 — the session waits what each answer asks, stays steerable and
cancellable while it waits, and a SIGTERM hands it over mid-wait."""

from __future__ import annotations

import itertools
import signal
import time
from collections.abc import Callable, Iterator

import pytest

from daemon.fakemodel import FakeError, overloaded, rate_limited, unavailable
from tests.crash.harness import Stack, pid_of_worker, stacks, user_texts, wait_until

pytestmark = pytest.mark.e2e

LEASE = 3.0
STAGING = "Use the staging server, not production."


@pytest.fixture(scope="module")
def weather(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """One stack for the tests whose worker lives on: each test's session is the only one
    running, and takes the weather its test scripts (the fake's next answers) in turn. The
    SIGTERM test stops its worker: it has a stack of its own."""
    factory = stacks(tmp_path_factory.mktemp("weather"), Stack)
    try:
        yield next(factory)(lease_seconds=LEASE).start()
    finally:
        next(factory, None)


def test_a_session_rides_out_529_529_429_503_and_honours_each_retry_after(weather: Stack) -> None:
    stack = weather
    asked = [0.5, 1.0, 3.0, 0.5]
    weather = [overloaded(asked[0]), overloaded(asked[1]), rate_limited(asked[2]), unavailable(asked[3])]
    stack.model.server.script.extend(weather)
    sid = stack.dispatch()
    wait_until(lambda: len(stack.model.requests_of(sid)) >= 3, "the 429", timeout=30)
    record = wait_until(
        lambda: (r := stack.record(sid)).get("waitingFor") == "model_retry" and r, "waitingFor", timeout=5
    )
    assert record["turnId"] == "1"  # the turn stays live while it waits
    steered = stack.http(
        "POST", f"/api/v2/sessions/{sid}/steer", {"text": STAGING, "expectedTurnId": 1, "clientMsgId": "s-1"}
    )
    assert steered.status == 200 and steered.body["status"] == "accepted", steered
    done = stack.wait_finished(sid)
    assert (done["status"], done["outcome"]) == ("completed", "workflow_complete"), stack.logs()

    requests = stack.model.requests_of(sid)
    gaps = [later - earlier for earlier, later in itertools.pairwise(r["_at"] for r in requests[:5])]
    for gap, wanted in zip(gaps, asked, strict=True):
        assert wanted <= gap < wanted + 2.0, (gaps, asked)  # measured at the fake
    retries = stack.events_of(sid, "model_retry")
    assert [(r["status"], r["attempt"], r["waitSeconds"]) for r in retries] == [
        (529, 1, 0.5), (529, 2, 1.0), (429, 3, 3.0), (503, 4, 0.5)
    ]  # fmt: skip
    assert all(STAGING not in user_texts(r) for r in requests[:5])  # the retried call: as it was
    assert sum(user_texts(r).count(STAGING) for r in requests[5:6]) == 1  # delivered at the turn's end
    assert all(user_texts(r).count(STAGING) == 1 for r in requests[5:])  # once, in every later call
    [receipt] = stack.events_of(sid, "steer_delivered")
    assert receipt["turnId"] == 2
    assert stack.record(sid).get("waitingFor", "") == ""


def test_a_cancel_during_the_wait_ends_the_session_within_a_second(weather: Stack) -> None:
    stack = weather
    stack.model.server.script.extend([overloaded(retry_after=60)])
    sid = stack.dispatch()
    wait_until(lambda: stack.record(sid).get("waitingFor") == "model_retry", "the retry wait", timeout=30)
    cancelled_at = time.monotonic()
    assert stack.http("POST", f"/api/v2/sessions/{sid}/cancel").status == 202
    done = stack.wait_finished(sid, timeout=10)
    took = time.monotonic() - cancelled_at
    assert (done["status"], done["outcome"]) == ("cancelled", "cancelled")
    assert took < 1.0, f"the cancel took {took:.2f}s"
    assert len(stack.model.requests_of(sid)) == 1


def test_a_plain_400_fails_at_once_with_one_call(weather: Stack) -> None:
    stack = weather
    stack.model.server.script.extend([FakeError(400, "invalid_request_error", "tools.0: bad schema")])
    sid = stack.dispatch()
    done = stack.wait_finished(sid)
    assert (done["status"], done["outcome"]) == ("failed", "model_error")
    assert "400" in done["outcomeDetail"] and "bad schema" in done["outcomeDetail"]
    assert len(stack.model.requests_of(sid)) == 1 and stack.events_of(sid, "model_retry") == []


def test_sigterm_during_the_wait_hands_the_session_over(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(lease_seconds=LEASE).start()
    stack.model.server.script.extend([overloaded(retry_after=60)])
    sid = stack.dispatch()
    wait_until(lambda: stack.record(sid).get("waitingFor") == "model_retry", "the retry wait", timeout=30)
    worker = stack.proc("worker1")
    stopped_at = time.monotonic()
    worker.process.send_signal(signal.SIGTERM)  # the pool passes it on to the horse
    assert worker.process.wait(15) == 0, worker.log()
    assert time.monotonic() - stopped_at < 10  # not the 60 s the API asked for
    record = stack.record(sid)
    assert (record["status"], record.get("handedOver")) == ("running", "1"), record
    assert stack.client is not None and stack.client.get(f"wt:session:{{{sid}}}:lease").startswith("reaper:")  # type: ignore[union-attr]
    stack.start_worker("worker2")
    done = stack.wait_finished(sid)
    assert (done["status"], done["attempt"]) == ("completed", "2"), stack.logs()
    assert pid_of_worker(done["worker"]) != worker.pid
