"""Shared fixtures: a real redis-server started by this test session, and fakeredis.

Bus tests take `redis_client`, parametrized over both, so the fake never hides a
real-Redis difference. Nothing here talks to a service somebody else started.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import fakeredis
import pytest
import redis

from daemon.bus.keys import Keys
from daemon.bus.session.registry import SessionRegistry
from daemon.bus.session.steerbus import SteerBus
from daemon.host.embedded_redis import RedisServer
from tests import durations, schedule, tierguard, tiers
from tests.leftovers import no_process_left_behind  # noqa: F401 -- autouse, session: no leftovers
from tests.tiers import fixture_tier

# No test may reach the real Anthropic API: without a key and with the base URL pointed at
# a closed local port, an SDK client built from the environment fails at once.
os.environ.pop("ANTHROPIC_API_KEY", None)
os.environ["ANTHROPIC_BASE_URL"] = "http://127.0.0.1:9"
# And the model adapter refuses api.anthropic.com outright (loudly) while this is set; child
# processes the tests start inherit it.
os.environ["WORKTRAIN_FORBID_REAL_API"] = "1"


def pytest_configure(config: pytest.Config) -> None:
    tiers.register(config)
    durations.register(config)
    config.pluginmanager.register(tiers, "worktrain-tiers")
    config.pluginmanager.register(tierguard, "worktrain-tierguard")
    config.pluginmanager.register(schedule, "worktrain-schedule")
    tierguard.install()


# The session's redis-server checks its blocked clients' timeouts 100 times a second, not 10
# (the default `hz`): at 10 a short blocking read (the event stream's grace, an idle wait's
# slice) returned up to 100 ms late, and the redis tier is full of them. The e2e stacks keep
# the default, as `worktrain up` runs it.
SESSION_REDIS_ARGS = ("--hz", "100")


@pytest.fixture(scope="session")
@fixture_tier("redis")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(Path(tmp_path_factory.mktemp("redis")), extra_args=SESSION_REDIS_ARGS)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def real_redis(redis_server: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    client.flushdb()
    yield client
    client.close()


@pytest.fixture
def fake_redis() -> Iterator[redis.Redis]:
    client = fakeredis.FakeRedis(decode_responses=True)
    yield client
    client.flushall()


@pytest.fixture(params=["real", "fake"])
@fixture_tier({"real": "redis", "fake": "unit"})
def redis_client(request: pytest.FixtureRequest) -> redis.Redis:
    name = "real_redis" if request.param == "real" else "fake_redis"
    client: redis.Redis = request.getfixturevalue(name)
    return client


@pytest.fixture
def keys() -> Keys:
    return Keys("wt")


@pytest.fixture
def bus(redis_client: redis.Redis, keys: Keys) -> SteerBus:
    return SteerBus(redis_client, keys, retention_seconds=3600)


@pytest.fixture
def registry(redis_client: redis.Redis, keys: Keys) -> SessionRegistry:
    return SessionRegistry(redis_client, keys)
