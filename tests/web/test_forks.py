"""`POST /api/v2/sessions/<id>/fork` (README's "Fork a session", SPEC 3.12) through the Flask app on a
real (and a fake) Redis: the answer, the records both ways (`forkOf`, `forks`), the fork's
events and its `session.forked` webhook, the errors (400, 404, 409, 413, 422 — never a 500),
the Idempotency-Key, and a request killed before its transaction ran leaving nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daemon.bus.session.dispatch import RqJobQueue
from daemon.fakemodel import ScriptedModel, reply, text, tool
from tests.agent.conftest import NOTES, Harness
from tests.web.conftest import Web, error_of, make_web
from tests.web.test_fuzz import assert_json_shape, json_values, scalars

pytestmark = pytest.mark.unit

STEER = "Try the other file first."


def finished_source(web: Web, tmp_path: Path) -> str:
    """A `none` session of two-step, run to its end in this process: 3 turns."""
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    (workspace / "README.md").write_text("# Project\n")
    harness = Harness(web.bus, web.registry, workspace, tmp_path / "data")
    sid = harness.create()
    model = ScriptedModel(
        [
            reply(text("Reading."), tool("Read", path="README.md")),
            reply(tool("continue_workflow", notes=NOTES)),
            reply(tool("continue_workflow", notes=NOTES)),
        ]
    )
    assert harness.run(model) == "workflow_complete"
    return sid


def fork(web: Web, sid: str, body: Any, key: str | None = None) -> Any:
    headers = {"Idempotency-Key": key} if key else {}
    return web.http.post(f"/api/v2/sessions/{sid}/fork", json=body, headers=headers)


def stream_kinds(client: redis.Redis, key: str) -> list[str]:
    return [json.loads(fields["data"])["kind"] for _, fields in client.xrange(key)]


def test_a_fork_answers_202_and_shows_on_both_records(web: Web, tmp_path: Path) -> None:
    source = finished_source(web, tmp_path)
    answer = fork(web, source, {"turn": 2, "steer": STEER})
    assert answer.status_code == 202, answer.get_json()
    data = answer.get_json()["data"]
    print(data)
    fork_id = data["sessionId"]
    assert data["forkOf"] == {"sessionId": source, "turn": 2, "snapshot": None} and data["status"] == "queued"
    assert data["conversationOnly"] is True and "not its files" in data["note"]
    record = web.http.get(f"/api/v2/sessions/{fork_id}").get_json()["data"]
    assert record["forkOf"] == data["forkOf"] and record["turnCount"] == 2
    assert record["pendingSteers"] == 1 and record["steerOffset"] == 1
    assert web.http.get(f"/api/v2/sessions/{source}").get_json()["data"]["forks"] == [
        {"sessionId": fork_id, "turn": 2, "status": "queued", "outcome": None}
    ]
    assert stream_kinds(web.client, web.keys.session(fork_id).events) == [
        "session_queued",
        "session_forked",
        "steer_accepted",
    ]
    steers = web.http.get(f"/api/v2/sessions/{fork_id}/steers").get_json()["data"]["steers"]
    assert [(s["offset"], s["text"], s["state"]) for s in steers] == [(1, STEER, "pending")]
    conversation = web.http.get(f"/api/v2/sessions/{fork_id}/conversation").get_json()["data"]["messages"]
    assert [(m["role"], m["turnId"]) for m in conversation] == [("user", 1), ("assistant", 1), ("user", 2),
                                                                ("assistant", 2), ("user", None)]  # fmt: skip
    # the last: turn 2's results, for the fork's turn 3, which has not started yet


def test_a_repeated_key_answers_the_first_fork_and_another_body_is_422(web: Web, tmp_path: Path) -> None:
    source = finished_source(web, tmp_path)
    first = fork(web, source, {"turn": 1, "steer": STEER}, key="fork-1")
    again = fork(web, source, {"turn": 1, "steer": STEER}, key="fork-1")
    assert first.status_code == again.status_code == 202
    assert again.get_json()["data"]["sessionId"] == first.get_json()["data"]["sessionId"]
    assert again.get_json()["data"]["duplicate"] is True
    assert error_of(fork(web, source, {"turn": 2, "steer": STEER}, key="fork-1")) == (
        422,
        "idempotency_key_reuse",
    )
    assert len(web.http.get(f"/api/v2/sessions/{source}").get_json()["data"]["forks"]) == 1


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"turn": 7, "steer": "x"}, (400, "unknown_turn")),
        ({"turn": 0}, (400, "invalid_request")),
        ({"turn": "2"}, (400, "invalid_request")),
        ({"turn": 2, "steer": "   "}, (400, "invalid_request")),
        ({"turn": 2, "extra": 1}, (400, "invalid_request")),
        ({"turn": 3, "steer": "x"}, (400, "invalid_request")),  # turn 3 completed the workflow
        (
            {"turn": 2, "agentConfig": {"maxOutputTokens": 2000, "thinkingBudgetTokens": 4000}},
            (400, "invalid_request"),
        ),
        ({"turn": 2, "steer": "x" * 40_000}, (413, "steer_too_large")),
    ],
)
def test_what_a_fork_refuses(web: Web, tmp_path: Path, body: Any, expected: tuple[int, str]) -> None:
    source = finished_source(web, tmp_path)
    answer = fork(web, source, body)
    print(answer.get_json())
    assert error_of(answer) == expected


def test_an_unknown_source_is_404_and_one_without_a_journal_409(web: Web, tmp_path: Path) -> None:
    assert error_of(fork(web, "sess_01JD0000000000000000000000", {"turn": 1})) == (404, "session_not_found")
    assert error_of(fork(web, "not-a-session", {"turn": 1})) == (404, "session_not_found")
    source = finished_source(web, tmp_path)
    web.client.delete(web.keys.session(source).history)  # the history evicted, the record not
    answer = fork(web, source, {"turn": 1, "steer": "x"})
    print(answer.get_json())
    assert error_of(answer) == (409, "journal_gone")
    web.client.delete(*web.keys.session(source).all())  # the retention period passed: marks outlive it
    answer = fork(web, source, {"turn": 1, "steer": "x"})
    print(answer.get_json())
    assert error_of(answer) == (409, "journal_gone") and "retention" in answer.get_json()["error"]
    web.client.delete(web.keys.turns_of(source))  # ... and then they too
    assert error_of(fork(web, source, {"turn": 1, "steer": "x"})) == (404, "session_not_found")


def test_session_forked_is_queued_as_a_webhook(redis_client: redis.Redis, tmp_path: Path) -> None:
    web = make_web(redis_client, tmp_path, webhook_urls="https://hooks.example.com/wt")
    try:
        source = finished_source(web, tmp_path)
        fork_id = fork(web, source, {"turn": 2, "steer": STEER}).get_json()["data"]["sessionId"]
        hooks = web.http.get(f"/api/v2/sessions/{fork_id}/webhooks").get_json()["data"]["deliveries"]
        assert [(h["type"], h["url"], h["state"]) for h in hooks] == [
            ("session.forked", "https://hooks.example.com/wt", "pending")
        ]
        body = json.loads(web.client.hget(web.keys.webhooks.deliveries, hooks[0]["id"]) or "{}")["body"]
        payload = json.loads(body)
        assert payload["forkOf"] == {"sessionId": source, "turn": 2} and payload["sessionId"] == fork_id
    finally:
        web.mirror.flush()


class Killed(BaseException):
    """The web process dies here (nothing in the view catches a BaseException)."""


def test_a_request_killed_before_its_transaction_ran_leaves_no_fork(
    web: Web, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = finished_source(web, tmp_path)
    before = set(web.client.keys("*"))
    original = RqJobQueue.watching

    def dying(self: RqJobQueue, key: str) -> Any:
        pipe = original(self, key)

        def execute(*_: Any, **__: Any) -> Any:
            raise Killed  # as a kill -9 between the commands queued and EXEC sent

        pipe.execute = execute
        return pipe

    monkeypatch.setattr(RqJobQueue, "watching", dying)
    with pytest.raises(Killed):
        fork(web, source, {"turn": 2, "steer": STEER}, key="dies-once")
    assert set(web.client.keys("*")) == before  # no record, history, marks, steer, job or key
    monkeypatch.setattr(RqJobQueue, "watching", original)
    again = fork(web, source, {"turn": 2, "steer": STEER}, key="dies-once")
    assert again.status_code == 202 and "duplicate" not in again.get_json()["data"]
    assert len(web.http.get(f"/api/v2/sessions/{source}").get_json()["data"]["forks"]) == 1


fork_bodies = (
    st.fixed_dictionaries(
        {},
        optional={
            "turn": st.integers(min_value=-3, max_value=2**70) | scalars,
            "steer": st.text(max_size=60) | scalars,
            "goal": st.text(max_size=60) | scalars,
            "agentConfig": json_values | st.fixed_dictionaries({}, optional={"model": scalars}),
        },
    )
    | json_values
)


@pytest.fixture
def forkable(real_web: Web, tmp_path: Path) -> str:
    return finished_source(real_web, tmp_path)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=fork_bodies)
def test_fork_json_bodies(real_web: Web, forkable: str, body: Any) -> None:
    """Whatever the body, JSON back: 202, or 400/409/413 with a code — never a 500."""
    response = real_web.http.post(
        f"/api/v2/sessions/{forkable}/fork", data=json.dumps(body), content_type="application/json"
    )
    assert_json_shape(response)
    assert response.status_code in (202, 400, 409, 413), response.get_json()
