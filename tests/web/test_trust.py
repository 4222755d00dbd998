"""The web tier's trust checks in the app (issue 10, findings 3, 4, 5, 9, 10): size and
pending caps, paged and slimmed reads, the loopback Host rule, tokens worth having, bind
addresses, a /readyz that names no address, strict cursors. Both steer paths (the WSGI fast
path and Flask) answer alike. Real servers: tests/web/test_server_trust.py."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from daemon.host.bind import UnsafeBind, check_bind, is_loopback_host, normalize_bind, token_problem
from tests.web.conftest import TOKEN, Web, error_of
from tests.web.test_errors import dead_redis_app
from web.models import MAX_CONTEXT_BYTES, MAX_GOAL_BYTES

pytestmark = pytest.mark.unit

MIB = 1024 * 1024


@pytest.fixture(params=["fast", "flask"])
def both(request: pytest.FixtureRequest, real_redis: redis.Redis, new_web: Callable[..., Web]) -> Web:
    web = new_web(real_redis)
    if request.param == "flask":
        web.http = web.app.test_client()
        web.app.wsgi_app = web.app.wsgi_app.inner  # type: ignore[attr-defined]  # the fast path's inner app
    return web


# ---- finding 3: caps -----------------------------------------------------------------------------


def test_a_one_megabyte_steer_is_refused_and_nothing_is_stored(both: Web) -> None:
    sid = both.new_session()
    used = both.client.info("memory")["used_memory"]
    for _ in range(5):
        assert error_of(both.steer(sid, {"text": "x" * 1_000_000})) == (413, "steer_too_large")
    assert both.bus.pending(sid) == [] and both.bus.journal(sid) == []
    assert both.client.info("memory")["used_memory"] - used < MIB  # each used to be stored twice


def test_the_steer_cap_counts_utf8_bytes(both: Web) -> None:
    sid = both.new_session()
    assert both.steer(sid, {"text": "x" * 32768}).status_code == 200
    assert error_of(both.steer(sid, {"text": "x" * 32769})) == (413, "steer_too_large")
    assert error_of(both.steer(sid, {"text": "é" * 16385})) == (413, "steer_too_large")  # 32770 bytes


def test_the_pending_cap_answers_429_with_retry_after_and_records_nothing(
    both: Web, new_web: Callable[..., Web]
) -> None:
    web = new_web(both.client, max_pending_steers=3)
    sid = web.new_session()
    for offset in (1, 2, 3):
        assert web.steer(sid, {"text": f"s{offset}"}).get_json()["steer"]["offset"] == offset
    refused = web.steer(sid, {"text": "one too many", "clientMsgId": "late"})
    assert error_of(refused) == (429, "too_many_pending_steers") and refused.headers["Retry-After"]
    assert [s.offset for s in web.bus.pending(sid)] == [1, 2, 3]
    assert len(web.bus.journal(sid) or []) == 3
    # nothing recorded: the same clientMsgId is not "used" ...
    web.client.lpop(web.keys.session(sid).pending)  # ... and once a steer is drained, it is accepted
    assert web.steer(sid, {"text": "one too many", "clientMsgId": "late"}).get_json()["steer"]["offset"] == 4


def test_the_pending_cap_holds_under_concurrent_steers(
    real_redis: redis.Redis, new_web: Callable[..., Web]
) -> None:
    web = new_web(real_redis, max_pending_steers=50)
    sid = web.new_session()
    statuses: list[int] = []
    barrier = threading.Barrier(8)

    def run(worker: int) -> None:
        http = web.app.test_client()
        barrier.wait()
        for i in range(15):
            statuses.append(
                http.post(f"/api/v2/sessions/{sid}/steer", json={"text": f"{worker}-{i}"}).status_code
            )

    threads = [threading.Thread(target=run, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(statuses) == [200] * 50 + [429] * 70
    assert [s.offset for s in web.bus.pending(sid)] == list(range(1, 51))


def test_dispatch_caps_goal_and_context(web: Web) -> None:
    assert web.dispatch(goal="g" * MAX_GOAL_BYTES).status_code == 202
    assert error_of(web.dispatch(goal="g" * 1_000_000)) == (400, "invalid_request")
    assert "32768 bytes" in web.dispatch(goal="é" * (MAX_GOAL_BYTES // 2 + 1)).get_json()["error"]
    big = {"blob": "x" * MAX_CONTEXT_BYTES}
    assert error_of(web.dispatch(context=big)) == (400, "invalid_request")
    assert web.dispatch(context={"blob": "x" * 1000}).status_code == 202


def test_the_steer_journal_is_paged(web: Web) -> None:
    sid = web.new_session()
    for i in range(5):
        web.steer(sid, {"text": f"steer {i + 1}"})
    offsets, since = [], 0
    while True:
        data = web.http.get(f"/api/v2/sessions/{sid}/steers?since={since}&limit=2").get_json()["data"]
        if not data["steers"]:
            assert data["next"] == since
            break
        offsets.append([s["offset"] for s in data["steers"]])
        since = data["next"]
    assert offsets == [[1, 2], [3, 4], [5]]
    assert error_of(web.http.get(f"/api/v2/sessions/{sid}/steers?limit=0")) == (400, "invalid_request")


def test_the_session_list_leaves_goal_and_context_out(web: Web) -> None:
    sid = web.dispatch(goal="a long goal " * 100, context={"k": "v" * 1000}).get_json()["data"]["sessionId"]
    [listed] = web.http.get("/api/v2/sessions").get_json()["data"]["sessions"]
    assert listed["sessionId"] == sid and "goal" not in listed and "context" not in listed
    one = web.http.get(f"/api/v2/sessions/{sid}").get_json()["data"]
    assert one["goal"].startswith("a long goal") and one["context"] == {"k": "v" * 1000}


# ---- finding 4: DNS rebinding --------------------------------------------------------------------


FOREIGN_HOSTS = ["rebind.attacker.example", "rebind.attacker.example:3456", "localhost.", "127.0.0.1.nip.io",
                 "[::2]", "::1", "0.0.0.0:3456", "", "local host"]  # fmt: skip


@pytest.mark.parametrize("host", FOREIGN_HOSTS)
def test_without_a_token_a_foreign_host_is_403(both: Web, host: str) -> None:
    sid = both.new_session()
    headers = {"Host": host}
    for response in (
        both.http.post("/api/v2/auto/dispatch", headers=headers, json={"workflowId": "two-step", "goal": "g",
                                                                        "workspacePath": "/tmp/ws"}),
        both.http.post(f"/api/v2/sessions/{sid}/steer", headers=headers, json={"text": "rebound"}),
        both.http.get("/api/v2/sessions", headers=headers),
        both.http.get("/api/v2/openapi.json", headers=headers),
    ):  # fmt: skip
        assert error_of(response) == (403, "forbidden_host")
    assert both.bus.pending(sid) == []
    assert both.http.get("/healthz", headers=headers).status_code == 200  # outside /api/v2


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.1:3456", "localhost", "LOCALHOST:80", "[::1]",
                                  "[::1]:3456", "127.9.8.7:1"])  # fmt: skip
def test_without_a_token_loopback_hosts_are_served(both: Web, host: str) -> None:
    sid = both.new_session()
    assert both.steer(sid, {"text": "hi"}, headers={"Host": host}).status_code == 200
    assert both.http.get("/api/v2/sessions", headers={"Host": host}).status_code == 200


def test_with_a_token_the_host_does_not_matter(real_redis: redis.Redis, new_web: Callable[..., Web]) -> None:
    web = new_web(real_redis, token=TOKEN)
    sid = web.new_session()
    headers = {"Host": "api.example.org", "Authorization": f"Bearer {TOKEN}"}
    assert web.steer(sid, {"text": "hi"}, headers=headers).status_code == 200
    assert error_of(web.steer(sid, {"text": "hi"}, headers={"Host": "api.example.org"})) == (
        401,
        "unauthorized",
    )


def test_is_loopback_host() -> None:
    assert is_loopback_host("localhost:1") and is_loopback_host("[::1]") and is_loopback_host("127.0.0.2")
    assert not any(map(is_loopback_host, ["evil.com", "[::1", "127.0.0.1:99999x", "::1", "1.2.3.4"]))


# ---- finding 5: tokens worth having --------------------------------------------------------------


WEAK_TOKENS = ["change-me", "a", "secret", "CHANGEME", "x" * 40, "change-me-" * 4,
               "token-token-token-token-token-token", "short-but-random-9f8e7d"]  # fmt: skip


@pytest.mark.parametrize("token", WEAK_TOKENS)
def test_weak_tokens_are_refused_with_the_reason(token: str) -> None:
    assert token_problem(token) is not None
    with pytest.raises(UnsafeBind, match="too weak"):
        check_bind("0.0.0.0", token)
    with pytest.raises(UnsafeBind, match="too weak"):
        check_bind("127.0.0.1", token)  # on loopback too: a token that protects nothing is a mistake


def test_a_strong_token_is_fine() -> None:
    assert token_problem(TOKEN) is None
    assert check_bind("0.0.0.0", TOKEN) == "0.0.0.0"


# ---- finding 10: bind addresses, cursors, Last-Event-ID ------------------------------------------


@pytest.mark.parametrize(("given", "bound"), [("localhost", "127.0.0.1"), ("[::1]", "::1"),
                                              ("127.0.0.1", "127.0.0.1"), ("::", "::")])  # fmt: skip
def test_bind_addresses_are_normalized(given: str, bound: str) -> None:
    assert normalize_bind(given) == bound


@pytest.mark.parametrize("given", [" 127.0.0.1", "::1%lo", "my-host", "127.0.0.1:80", ""])
def test_unusable_bind_addresses_are_a_sentence(given: str) -> None:
    with pytest.raises(UnsafeBind, match="--bind"):
        normalize_bind(given)


def test_an_empty_or_foreign_last_event_id_is_400_not_a_replay(web: Web) -> None:
    sid = web.new_session()
    for value in ("", "١٢٣", "abc", "1-2-3"):
        response = web.http.get(f"/api/v2/sessions/{sid}/events", headers={"Last-Event-ID": value})
        assert error_of(response) == (400, "invalid_request"), value


@pytest.mark.redis
def test_readyz_names_no_address(tmp_path: Path) -> None:
    body = dead_redis_app(tmp_path).get("/readyz").get_json()
    assert body["code"] == "not_ready" and "127.0.0.1" not in body["error"] and ":" not in body["error"]
