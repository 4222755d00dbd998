"""Bearer-token auth (docs/security.md) and the loopback-only rule without a token."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from daemon.host.bind import UnsafeBind, check_bind, is_loopback
from tests.web.conftest import TOKEN, error_of, make_web

pytestmark = pytest.mark.unit


@pytest.fixture
def guarded(real_redis: redis.Redis, tmp_path: Path):  # type: ignore[no-untyped-def]
    return make_web(real_redis, tmp_path, token=TOKEN)


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}, {"Authorization": f"Basic {TOKEN}"},
     {"Authorization": f"Bearer {TOKEN}x"}, {"Authorization": "Bearer "}, {"Authorization": "Bearer é"}],
)  # fmt: skip
def test_api_needs_the_token(guarded, headers: dict[str, str]) -> None:  # type: ignore[no-untyped-def]
    for response in (
        guarded.http.get("/api/v2/sessions", headers=headers),
        guarded.http.get("/api/v2/no-such-route", headers=headers),
        guarded.http.post("/api/v2/auto/dispatch", headers=headers, json={}),
    ):
        assert error_of(response) == (401, "unauthorized")


def test_token_lets_requests_through(guarded) -> None:  # type: ignore[no-untyped-def]
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert guarded.http.get("/api/v2/sessions", headers=auth).status_code == 200
    sid = guarded.new_session()
    response = guarded.http.post(f"/api/v2/sessions/{sid}/steer", json={"text": "x"}, headers=auth)
    assert response.status_code == 200


def test_health_routes_stay_open(guarded) -> None:  # type: ignore[no-untyped-def]
    assert guarded.http.get("/healthz").status_code == 200
    assert guarded.http.get("/readyz").status_code == 200


@pytest.mark.parametrize("host", ["127.0.0.1", "127.1.2.3", "localhost", "::1", "[::1]"])
def test_loopback_hosts(host: str) -> None:
    assert is_loopback(host)
    check_bind(host, None)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.1", "example.com", "192.168.1.2"])
def test_non_loopback_without_token_is_refused(host: str) -> None:
    assert not is_loopback(host)
    with pytest.raises(UnsafeBind, match=r"WORKTRAIN_API_TOKEN|not an IP address"):
        check_bind(host, None)
    if host != "example.com":  # a host name is refused either way (tests/web/test_trust.py)
        check_bind(host, TOKEN)  # with a token, any address


def test_serve_options_shapes_and_ipv6_bind() -> None:
    from web.serve import ServeOptions

    assert ServeOptions("127.0.0.1", 1).shape() == (2, 8)
    assert ServeOptions("127.0.0.1", 1, server="gunicorn").shape() == (3, 4)
    assert ServeOptions("127.0.0.1", 1, workers=5, threads=1).shape() == (5, 1)
    assert ServeOptions("::1", 8080).bind == "[::1]:8080"


def test_serve_refuses_before_listening(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from daemon.host.config import Settings
    from web.serve import ServeOptions, serve

    with pytest.raises(UnsafeBind):
        serve(Settings(data_dir=tmp_path, api_token=None), ServeOptions("0.0.0.0", 1))
    with pytest.raises(ValueError, match="unknown server"):
        serve(Settings(data_dir=tmp_path, api_token=None), ServeOptions("127.0.0.1", 1, server="nope"))
