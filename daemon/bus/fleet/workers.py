"""Which worker processes are alive, and what each runs (docs/operations.md, `GET /api/v2/workers`).

Each worker process registers itself as RQ registers its workers: a record with a TTL
(`Keys.worker(id)`, JSON) and an entry in the sorted set `Keys.workers` scored by its last
heartbeat. The beat rides on the process's metrics flush (daemon/bus/fleet/metrics.py
`MetricsRecorder.on_flush`): the same pipeline, once a second, no connection or thread of
its own. A process that dies stops beating: its record expires after `TTL_SECONDS` and the
reader prunes its entry from the set. A clean stop removes both at once (`leave`).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import redis
from pydantic import BaseModel

from daemon.bus.keys import Keys
from daemon.host.filesystemview import filesystem_view
from daemon.host.redisconn import as_text

log = logging.getLogger(__name__)

TTL_SECONDS = 15  # a worker not heard of for this long is gone


class WorkerInfo(BaseModel):
    """One live worker process, as it last published itself."""

    id: str  # host:pid
    host: str
    pid: int
    concurrency: int
    sessions: list[str]
    sandbox: dict[str, str]  # layer -> state (docs/security.md)
    # which files it sees at which paths (daemon/host/filesystemview.py): the CLI checks a
    # workspace itself only when every worker's equals its own; "" from an older worker
    filesystem: str = ""
    modelCallsInFlight: int = 0
    startedAt: str
    heartbeatAt: str


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class WorkerPresence:
    """One worker process's entry: `stage(pipe)` writes its beat into a caller's pipeline."""

    def __init__(
        self,
        keys: Keys,
        concurrency: int,
        sessions: Callable[[], list[str]],
        sandbox: Mapping[str, str],
        in_flight: Callable[[], int] = lambda: 0,
    ) -> None:
        self.keys = keys
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.id = f"{self.host}:{self.pid}"
        self.concurrency = concurrency
        self.sessions = sessions
        self.sandbox = dict(sandbox)
        self.in_flight = in_flight
        self.started_at = _now_iso()
        self.filesystem = filesystem_view()

    def info(self) -> WorkerInfo:
        return WorkerInfo(
            id=self.id,
            host=self.host,
            pid=self.pid,
            concurrency=self.concurrency,
            sessions=sorted(self.sessions()),
            sandbox=self.sandbox,
            filesystem=self.filesystem,
            modelCallsInFlight=self.in_flight(),
            startedAt=self.started_at,
            heartbeatAt=_now_iso(),
        )

    def stage(self, pipe: Any) -> None:
        pipe.set(self.keys.worker(self.id), self.info().model_dump_json(), ex=TTL_SECONDS)
        pipe.zadd(self.keys.workers, {self.id: int(time.time() * 1000)})

    def leave(self, client: redis.Redis) -> None:
        try:
            pipe = client.pipeline(transaction=False)
            pipe.delete(self.keys.worker(self.id))
            pipe.zrem(self.keys.workers, self.id)
            pipe.execute()
        except redis.RedisError as exc:  # it expires by itself within TTL_SECONDS
            log.warning("worker entry %s not removed: %s", self.id, exc)


def live_workers(client: redis.Redis, keys: Keys, now_ms: int | None = None) -> list[WorkerInfo]:
    """Every worker heard of within TTL_SECONDS, by id; gone ones leave the set."""
    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    client.zremrangebyscore(keys.workers, "-inf", now_ms - TTL_SECONDS * 1000)
    ids = [as_text(member) for member in client.zrange(keys.workers, 0, -1)]
    if not ids:
        return []
    found = []
    for worker_id, raw in zip(ids, client.mget([keys.worker(i) for i in ids]), strict=True):
        if raw is None:
            continue  # expired between the two reads
        try:
            found.append(WorkerInfo.model_validate(json.loads(as_text(raw))))
        except (ValueError, TypeError) as exc:
            log.warning("worker entry %s unreadable: %s", worker_id, exc)
    return sorted(found, key=lambda w: w.id)
