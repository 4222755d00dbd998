"""State changes come from WorkTrain's own clients only (issue 21: L2, L1, workspace roots):
JSON-only POST/PATCH/DELETE and an Origin / Sec-Fetch-Site check (403 `forbidden_origin`),
a bounded journal per steer (WORKTRAIN_MAX_STEER_EDITS, the replaced text's hash), and
workspaces the server will hand out (400 `workspace_not_allowed`). The browser's side of the
origin check is tests/console/test_cross_origin.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from tests.web.conftest import TOKEN, Web, error_of

pytestmark = pytest.mark.unit


def cancel(web: Web, sid: str, **kwargs: object) -> tuple[int, str]:
    response = web.http.post(f"/api/v2/sessions/{sid}/cancel", **kwargs)  # type: ignore[arg-type]
    body = response.get_json()
    return response.status_code, body.get("code", "")


# ---- L2: no-cors requests of a page on another site ---------------------------------------------

# What `fetch(url, {mode: 'no-cors', method: 'POST', body})` can send: no custom header, and a
# Content-Type among the three "simple" ones (or none).
SIMPLE_TYPES = [
    None,
    "text/plain;charset=UTF-8",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x",
]


@pytest.mark.parametrize("content_type", SIMPLE_TYPES)
def test_a_state_change_not_declared_json_is_415_and_changes_nothing(
    web: Web, content_type: str | None
) -> None:
    sid = web.new_session()
    kwargs = {"data": b"{}", "content_type": content_type} if content_type else {"data": b""}
    assert cancel(web, sid, **kwargs) == (415, "unsupported_media_type")
    steer = web.http.post(
        f"/api/v2/sessions/{sid}/steer", data=b'{"text": "x"}', content_type=content_type or ""
    )
    assert error_of(steer) == (415, "unsupported_media_type")
    assert web.registry.get(sid).status == "queued" and web.bus.pending(sid) == []


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "http://attacker.example"},
        {"Origin": "http://127.0.0.1:9999"},  # another local server: another origin
        {"Origin": "null"},  # a sandboxed frame or a file:// page
        {"Sec-Fetch-Site": "cross-site"},
        {"Origin": "http://localhost", "Sec-Fetch-Site": "cross-site"},
    ],
)
def test_a_cross_origin_state_change_is_403_token_or_not(
    web: Web, new_web: object, redis_client: redis.Redis, headers: dict[str, str]
) -> None:
    sid = web.new_session()
    json_headers = {**headers, "Content-Type": "application/json"}
    assert cancel(web, sid, headers=json_headers) == (403, "forbidden_origin")
    dispatch = web.http.post(
        "/api/v2/auto/dispatch",
        json={"workflowId": "two-step", "goal": "g", "workspacePath": "/tmp/ws"},
        headers=headers,
    )
    assert error_of(dispatch) == (403, "forbidden_origin")
    assert web.registry.get(sid).status == "queued"
    with_token: Web = new_web(redis_client, token=TOKEN)  # type: ignore[operator]
    bearer = {**json_headers, "Authorization": f"Bearer {TOKEN}"}
    assert cancel(with_token, sid, headers=bearer) == (403, "forbidden_origin")
    assert with_token.registry.get(sid).status == "queued"


def test_the_consoles_own_requests_and_non_browser_clients_pass(web: Web) -> None:
    sid = web.new_session()
    same_origin = {"Origin": "http://localhost", "Sec-Fetch-Site": "same-origin"}  # the test client's Host
    assert web.steer(sid, {"text": "from the console"}, headers=same_origin).status_code == 200
    assert cancel(web, sid, headers={"Content-Type": "application/json"}) == (202, "")  # the CLI: no Origin
    # Reads stay open to a GET from anywhere the guard allows (the response is not readable cross-site).
    assert (
        web.http.get(f"/api/v2/sessions/{sid}", headers={"Sec-Fetch-Site": "cross-site"}).status_code == 200
    )


# ---- L1: a steer's edits are bounded --------------------------------------------------------------


def test_many_large_edits_of_one_steer_do_not_grow_redis(new_web: object, real_redis: redis.Redis) -> None:
    """The finding: 1,500 PATCHes of 32 KiB on one pending steer added 94.5 MiB to Redis."""
    web: Web = new_web(real_redis, max_steer_edits=20)  # type: ignore[operator]
    sid = web.new_session()
    assert web.steer(sid, {"text": "original"}).status_code == 200
    journal = web.keys.session(sid).journal
    before = real_redis.memory_usage(journal, samples=0) or 0
    statuses: dict[int, int] = {}
    for n in range(1500):
        text = f"{n:05d}" + "x" * (32 * 1024 - 5)
        answer = web.http.patch(f"/api/v2/sessions/{sid}/steers/1", json={"text": text})
        statuses[answer.status_code] = statuses.get(answer.status_code, 0) + 1
    assert statuses == {200: 20, 409: 1480}
    assert error_of(web.http.patch(f"/api/v2/sessions/{sid}/steers/1", json={"text": "y"})) == (
        409,
        "too_many_edits",
    )
    grown = (real_redis.memory_usage(journal, samples=0) or 0) - before
    # 20 new texts at most, never the replaced ones (was 94.5 MiB). A 32 KiB text costs what
    # the allocator rounds it to: 6.2's libc malloc ~33 KiB, 7.x's jemalloc a 40 KiB size
    # class (jemalloc's classes waste at most 25%): measured 0.69 MiB on 6.2, 0.79 MiB on 7.0.
    assert grown < 21 * 33 * 1024 * 5 // 4
    edited = [e for e in web.bus.journal(sid) or [] if e.type == "edited"]
    assert len(edited) == 20 and all(e.previousText is None for e in edited)
    assert edited[0].previousLength == len("original") and edited[1].previousLength == 32 * 1024
    assert web.bus.pending(sid)[0].text.startswith("00019")  # the 20th edit stands, in place


# ---- workspace roots ----------------------------------------------------------------------------


def test_dispatch_refuses_the_root_the_data_dir_and_paths_inside_it(web: Web) -> None:
    for path in (
        "/",
        str(web.data_dir),
        str(web.data_dir / "redis"),
        f"{web.data_dir}/x/../redis",
        "/tmp/../",
    ):
        assert error_of(web.dispatch(workspacePath=path)) == (400, "workspace_not_allowed"), path
    assert web.dispatch(workspacePath="/tmp/ws").status_code == 202


def test_dispatch_refuses_a_workspace_outside_the_roots(
    new_web: object, redis_client: redis.Redis, tmp_path: Path
) -> None:
    roots = (tmp_path / "repos", tmp_path / "more")
    web: Web = new_web(redis_client, data_dir=tmp_path / "data", workspace_roots=roots)  # type: ignore[operator]
    (tmp_path / "repos" / "a").mkdir(parents=True)
    (tmp_path / "repos" / "escape").symlink_to(tmp_path / "elsewhere")
    assert web.dispatch(workspacePath=str(tmp_path / "repos" / "a")).status_code == 202
    assert web.dispatch(workspacePath=str(tmp_path / "more")).status_code == 202
    for path in (
        "/var/tmp",
        str(tmp_path / "repos-evil"),
        str(tmp_path / "repos" / "escape"),
        str(tmp_path / "repos/../x"),
    ):
        answer = web.dispatch(workspacePath=path)
        assert error_of(answer) == (400, "workspace_not_allowed"), path
        assert "WORKTRAIN_WORKSPACE_ROOTS" in answer.get_json()["error"]
