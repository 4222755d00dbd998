"""`python -m worker.health`, the worker container's healthcheck (docker-compose.yml): alive
when a worker of this host beats in Redis, not when one of another host does."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
import redis

from daemon.bus.fleet.workers import WorkerPresence
from daemon.bus.keys import Keys
from daemon.host.config import Settings
from daemon.host.embedded_redis import RedisServer, free_port
from worker.health import ALIVE, NONE_ALIVE, UNKNOWN, check

pytestmark = pytest.mark.processes


def beat(client: redis.Redis, host: str) -> WorkerPresence:
    presence = WorkerPresence(Keys("wt"), 1, list, {})
    presence.host = host
    presence.id = f"{host}:{presence.pid}"
    pipe = client.pipeline()
    presence.stage(pipe)
    pipe.execute()
    return presence


def test_alive_only_with_a_worker_of_this_host(real_redis: redis.Redis, redis_server: RedisServer) -> None:
    settings = Settings(redis_url=redis_server.url)
    code, line = check(settings, "container-a")
    assert code == NONE_ALIVE and "container-a" in line
    beat(real_redis, "container-b")  # the other replica's beat is not this container's
    assert check(settings, "container-a")[0] == NONE_ALIVE
    here = beat(real_redis, "container-a")
    code, line = check(settings, "container-a")
    assert (code, line) == (ALIVE, f"alive: {here.id}")
    here.leave(real_redis)  # a worker that stopped
    assert check(settings, "container-a")[0] == NONE_ALIVE


def test_unknown_when_redis_cannot_be_asked() -> None:
    code, line = check(Settings(redis_url=f"redis://127.0.0.1:{free_port()}/0"), "h")
    assert code == UNKNOWN and line.startswith("cannot ask Redis")


def test_the_module_runs_as_the_healthcheck_does(real_redis: redis.Redis, redis_server: RedisServer) -> None:
    env = {**os.environ, "REDIS_URL": redis_server.url}
    env.pop("WORKTRAIN_REDIS_PREFIX", None)
    health = [sys.executable, "-m", "worker.health"]
    ran = subprocess.run(health, env=env, capture_output=True, text=True, timeout=30)
    assert ran.returncode == NONE_ALIVE, ran.stderr
    beat(real_redis, socket.gethostname())
    ran = subprocess.run(health, env=env, capture_output=True, text=True, timeout=30)
    assert ran.returncode == ALIVE and ran.stdout.startswith("alive: "), ran.stderr
