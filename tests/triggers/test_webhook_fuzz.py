"""Fuzzing `POST /api/v2/triggers/<id>` (README's Triggers): whatever a sender sends — any event
header, any JSON or none, signed with the trigger's secret or not — the answer is JSON and
one of the route's statuses, never a 500; an unsigned request starts nothing."""

from __future__ import annotations

import json
import string
from pathlib import Path
from typing import Any

import fakeredis
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fakes.github import sign
from tests.triggers.conftest import SECRET, github_webhook_trigger, make_trigger_web, triggers_from

pytestmark = pytest.mark.unit  # the tier (tests/tiers.py on the tiers branch)

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
STATUSES = {202, 400, 401, 404, 413, 415, 422}

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=16,
)
issue_like = st.fixed_dictionaries(
    {},
    optional={
        "action": st.sampled_from(["labeled", "created", "opened", ""]) | scalars,
        "issue": st.fixed_dictionaries(
            {},
            optional={
                "number": scalars,
                "title": scalars,
                "labels": json_values,
                "pull_request": json_values,
            },
        )
        | scalars,
        "label": st.fixed_dictionaries({}, optional={"name": st.sampled_from(["agent", "x"]) | scalars})
        | scalars,
        "comment": st.fixed_dictionaries({}, optional={"body": scalars, "user": json_values}) | scalars,
        "repository": st.fixed_dictionaries(
            {}, optional={"full_name": st.sampled_from(["acme/app"]) | scalars}
        ),
        "sender": json_values,
    },
)
bodies = st.one_of(
    issue_like.map(lambda v: json.dumps(v).encode()),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=200),
)
events = st.sampled_from(["issues", "issue_comment", "ping", "pull_request", "", "ISSUES"]) | st.text(
    alphabet=string.printable, max_size=20
)
content_types = st.sampled_from(
    [
        "application/json",
        "application/x-www-form-urlencoded",
        "text/plain",
        "",
        "application/json; charset=utf-8",
    ]
)


@pytest.fixture
def hooked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("TEST_GH_WEBHOOK_SECRET", SECRET)
    client = fakeredis.FakeRedis(decode_responses=True)
    yield make_trigger_web(client, tmp_path, triggers_from(github_webhook_trigger(tmp_path)))
    client.flushall()


@FUZZ
@given(
    body=bodies, event=events, content_type=content_types, signed=st.booleans(), delivery=st.text(max_size=50)
)
def test_any_request_is_answered_in_json_without_a_500(
    hooked: Any, body: bytes, event: str, content_type: str, signed: bool, delivery: str
) -> None:
    before = len(hooked.sessions())
    headers = {"Content-Type": content_type, "X-GitHub-Event": event, "X-GitHub-Delivery": delivery}
    if signed:
        headers["X-Hub-Signature-256"] = sign(SECRET, body)
    try:
        answer = hooked.post("fix-labelled-issues", body, headers)
    except ValueError:  # werkzeug refuses a header value with a newline before any request is made
        return
    assert answer.status_code in STATUSES, (answer.status_code, answer.get_data()[:300])
    assert answer.is_json and isinstance(answer.get_json()["success"], bool)
    if not signed:
        assert answer.status_code in (401, 415) and len(hooked.sessions()) == before
