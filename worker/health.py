"""`python -m worker.health`: whether a worker of this host is alive, for a container's
healthcheck (docker-compose.yml's `worker` service).

Alive means what `GET /api/v2/workers` means (daemon/bus/fleet/workers.py): a worker process on
this host (its hostname: a container's own) has published its presence within
`TTL_SECONDS`. A worker publishes only once its sandbox probe passed, so under
`WORKTRAIN_SANDBOX=required` a healthy worker is also one with every layer in force. Exit 0
when one is, 1 when none is (the reason on stderr), 2 when Redis cannot be asked.
"""

from __future__ import annotations

import socket
import sys

import redis

from daemon.bus.fleet.workers import WorkerInfo, live_workers
from daemon.bus.keys import Keys
from daemon.host.config import Settings
from daemon.host.redisconn import connect

ALIVE, NONE_ALIVE, UNKNOWN = 0, 1, 2


def workers_here(workers: list[WorkerInfo], host: str) -> list[WorkerInfo]:
    return [worker for worker in workers if worker.host == host]


def check(settings: Settings, host: str) -> tuple[int, str]:
    """The exit code and the line to say."""
    try:
        client = connect(settings.redis_url_or_default, socket_timeout=3.0)
        try:
            found = workers_here(live_workers(client, Keys(settings.redis_prefix)), host)
        finally:
            client.close()
    except redis.RedisError as exc:
        return UNKNOWN, f"cannot ask Redis: {exc}"
    if not found:
        return NONE_ALIVE, f"no worker of host {host} has beaten in Redis lately"
    ids = ", ".join(worker.id for worker in found)
    return ALIVE, f"alive: {ids}"


def main() -> None:
    code, line = check(Settings(), socket.gethostname())
    print(line, file=sys.stderr if code else sys.stdout)
    sys.exit(code)


if __name__ == "__main__":
    main()
