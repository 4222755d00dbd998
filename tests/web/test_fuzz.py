"""Fuzzing the write routes, and the query and header values of the read routes: whatever
arrives, the answer is JSON, 2xx or 4xx (or a stream that runs to its end), never 500 or HTML."""

from __future__ import annotations

import json
import string
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from werkzeug.test import TestResponse

from daemon.host.config import Settings
from daemon.schema.records import SessionStatus
from tests.web.conftest import FIXTURE_WORKFLOWS, Web
from web import streams as web_streams
from web.serve import build_app

pytestmark = pytest.mark.unit

FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
steer_bodies = (
    st.fixed_dictionaries(
        {},
        optional={
            "text": st.text(max_size=200) | scalars | st.just(" " * 50),
            "expectedTurnId": st.integers(min_value=-5, max_value=2**70) | scalars,
            "clientMsgId": st.text(alphabet=string.printable, max_size=140) | scalars,
        },
    )
    | json_values
)
dispatch_bodies = (
    st.fixed_dictionaries(
        {},
        optional={
            "workflowId": st.sampled_from(["two-step", "nope", ""]) | scalars,
            "goal": st.text(max_size=50) | scalars,
            "workspacePath": st.sampled_from(["/tmp", "rel", "/", "C:\\x", "/a\x00b"]) | scalars,
            "context": json_values,
        },
    )
    | json_values
)
path_ids = st.text(alphabet=string.ascii_letters + string.digits + "_-.%~{}:é", max_size=40) | st.just(
    "sess_01JD0000000000000000000000"
)
content_types = st.sampled_from(
    [
        "application/json",
        "application/json; charset=utf-8",
        "text/plain",
        "",
        "application/xml",
        "application/foo+json",
    ]
)


def assert_json_shape(response: TestResponse) -> dict[str, Any]:
    assert response.status_code < 500, response.data[:300]
    assert response.mimetype == "application/json", response.data[:300]
    body = response.get_json()
    assert isinstance(body, dict) and isinstance(body["success"], bool)
    if not body["success"]:
        assert response.status_code >= 400
        assert isinstance(body["code"], str) and isinstance(body["error"], str) and body["error"]
    return body


@pytest.fixture
def session(real_web: Web) -> str:
    return real_web.new_session()


def standalone_console(data_dir: Path) -> FlaskClient:
    sid = "sess_01JD0000000000000000000000"
    (data_dir / "events").mkdir(parents=True, exist_ok=True)
    (data_dir / "issues").mkdir(parents=True, exist_ok=True)
    (data_dir / "events" / "2026-01-01.jsonl").write_text(json.dumps({"sessionId": sid, "kind": "x"}) + "\n")
    (data_dir / "issues" / f"{sid}.jsonl").write_text(json.dumps({"sessionId": sid, "ts": "t"}) + "\n")
    settings = Settings(data_dir=data_dir, redis_url="redis://127.0.0.1:9/0", workflows_dir=FIXTURE_WORKFLOWS)
    return build_app(settings, standalone=True).test_client()


@FUZZ
@given(body=steer_bodies)
def test_steer_json_bodies(real_web: Web, session: str, body: Any) -> None:
    response = real_web.http.post(
        f"/api/v2/sessions/{session}/steer", data=json.dumps(body), content_type="application/json"
    )
    result = assert_json_shape(response)
    if response.status_code == 200:
        assert isinstance(body, dict) and isinstance(body.get("text"), str) and body["text"].strip()
        assert result["status"] in ("accepted", "duplicate")


@FUZZ
@given(raw=st.binary(max_size=300), content_type=content_types, sid=path_ids)
def test_steer_raw_bytes_any_path(real_web: Web, raw: bytes, content_type: str, sid: str) -> None:
    headers = {"Content-Type": content_type} if content_type else {}
    assert_json_shape(real_web.http.post(f"/api/v2/sessions/{sid}/steer", data=raw, headers=headers))


@FUZZ
@given(body=dispatch_bodies)
def test_dispatch_json_bodies(real_web: Web, body: Any) -> None:
    response = real_web.http.post(
        "/api/v2/auto/dispatch", data=json.dumps(body), content_type="application/json"
    )
    assert_json_shape(response)
    assert response.status_code in (202, 400)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sid=path_ids,
    suffix=st.sampled_from(["", "/steers", "/cancel", "/fork", "/nope", "/steer/x"]),
    method=st.sampled_from(["get", "post", "put"]),
)
def test_session_paths(real_web: Web, sid: str, suffix: str, method: str) -> None:
    response = getattr(real_web.http, method)(f"/api/v2/sessions/{sid}{suffix}")
    assert_json_shape(response)


# --- query and header values of the read routes --------------------------------------------------

MAX_ID_PART = 2**64 - 1
ARABIC_INDIC_DAY = "\u0662\u0660\u0662\u0666-\u0660\u0661-\u0660\u0661:\u0663"  # 2026-01-01:3
SPECIAL_IDS = ["", "0", "-", "+", "$", "0-0", "1-", "-1", f"{MAX_ID_PART}", f"{MAX_ID_PART}-{MAX_ID_PART}",
               f"{MAX_ID_PART}-{MAX_ID_PART - 1}", f"{MAX_ID_PART + 1}", "2026-01-01:1",
               "sess_01JD0000000000000000000000:1", ARABIC_INDIC_DAY]  # fmt: skip
big_numbers = st.integers(min_value=0, max_value=2**80).map(str)
any_digits = st.text(alphabet=st.characters(categories=["Nd"]), min_size=1, max_size=22)  # any script
stream_ids = st.one_of(
    big_numbers,
    st.tuples(big_numbers | any_digits, big_numbers | any_digits).map("-".join),
    any_digits,
    st.sampled_from(SPECIAL_IDS),
    st.text(max_size=30),
)
limits = st.one_of(
    big_numbers, any_digits, st.integers(min_value=-5, max_value=2000).map(str), st.text(max_size=8)
)
session_args = (
    st.sampled_from(["", "sess_01JD0000000000000000000000", "sess_01jd0000000000000000000000"]) | path_ids
)
# Header values as a WSGI server hands them over: latin-1 text without control characters.
header_values = st.text(
    alphabet=st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f")
)
read_queries = st.fixed_dictionaries(
    {}, optional={"since": stream_ids, "limit": limits, "sessionId": session_args}
)


@FUZZ
@given(route=st.sampled_from(["events", "issues"]), query=read_queries)
def test_read_route_query_values(real_web: Web, session: str, route: str, query: dict[str, str]) -> None:
    real_web.client.xadd(real_web.keys.issues, {"data": "{}", "sessionId": session})
    assert_json_shape(real_web.http.get(f"/api/v2/{route}", query_string=query))
    if "sessionId" in query:  # and for a session that exists
        assert_json_shape(real_web.http.get(f"/api/v2/{route}", query_string={**query, "sessionId": session}))


@pytest.fixture
def standalone(tmp_path: Path) -> FlaskClient:
    """One standalone console for every example (reads only: no example changes what the next sees)."""
    return standalone_console(tmp_path)


@FUZZ
@given(route=st.sampled_from(["events", "issues"]), query=read_queries)
def test_standalone_read_route_query_values(
    standalone: FlaskClient, route: str, query: dict[str, str]
) -> None:
    assert_json_shape(standalone.get(f"/api/v2/{route}", query_string=query))


@FUZZ
# A header value cannot carry a line break (HTTP): such values are not sendable at all.
@given(
    last_event_id=stream_ids.filter(lambda v: v.isascii() and not set(v) & {"\r", "\n"}) | header_values,
    since=stream_ids,
)
def test_sse_last_event_id_and_since(
    real_web: Web, finished: str, monkeypatch: pytest.MonkeyPatch, last_event_id: str, since: str
) -> None:
    monkeypatch.setattr(
        web_streams, "FINISHED_GRACE_MS", 5
    )  # a finished session's stream ends after 5 ms idle
    for headers, query in (({"Last-Event-ID": last_event_id}, {}), ({}, {"since": since})):
        path = f"/api/v2/sessions/{finished}/events"
        response = real_web.http.get(path, headers=headers, query_string=query)
        if response.status_code == 200:
            assert response.mimetype == "text/event-stream"
            assert b"".join(response.response).startswith(b"retry:")  # ran to its end, raised nothing
        else:
            assert_json_shape(response)


@pytest.fixture
def finished(real_web: Web) -> str:
    sid = real_web.dispatch().get_json()["data"]["sessionId"]
    channel = real_web.bus.channel(sid, "w1", 30)
    channel.claim()
    channel.finish(SessionStatus.COMPLETED, "workflow_complete")
    return sid
