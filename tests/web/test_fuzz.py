"""Fuzzing the write routes: whatever arrives, the answer is JSON, 2xx or 4xx, never 500 or HTML."""

from __future__ import annotations

import json
import string
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from werkzeug.test import TestResponse

from tests.web.conftest import Web

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
    suffix=st.sampled_from(["", "/steers", "/cancel", "/nope", "/steer/x"]),
    method=st.sampled_from(["get", "post", "put"]),
)
def test_session_paths(real_web: Web, sid: str, suffix: str, method: str) -> None:
    response = getattr(real_web.http, method)(f"/api/v2/sessions/{sid}{suffix}")
    assert_json_shape(response)
