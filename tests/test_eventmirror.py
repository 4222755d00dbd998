"""The off-request-path event mirror: batches, survives failures, restarts after a fork."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from daemon.bus.keys import Keys
from daemon.bus.streams.mirror import EventMirror
from daemon.host.embedded_redis import free_port
from daemon.schema.events import SteerAccepted

pytestmark = pytest.mark.unit

SID = "sess_01JD0000000000000000000000"


def event(offset: int) -> SteerAccepted:
    return SteerAccepted(sessionId=SID, turnId=0, offset=offset)


def test_mirrors_into_the_global_stream_and_jsonl_in_order(real_redis: redis.Redis, tmp_path: Path) -> None:
    mirror = EventMirror(real_redis, Keys("wt"), tmp_path)
    for offset in range(1, 301):
        mirror.submit(event(offset))
    assert mirror.flush()
    offsets = [int(f["data"].split('"offset":')[1].split(",")[0]) for _, f in real_redis.xrange("wt:events")]
    assert offsets == list(range(1, 301))
    (day,) = (tmp_path / "events").glob("*.jsonl")
    assert len(day.read_text().splitlines()) == 300
    # accept.lua wrote the session's own stream: the mirror must not write it a second time
    assert real_redis.xlen(Keys("wt").session(SID).events) == 0


@pytest.mark.redis
def test_a_dead_redis_is_logged_and_the_file_still_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    client = redis.Redis(port=free_port(), socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0))
    mirror = EventMirror(client, Keys("wt"), tmp_path)
    with caplog.at_level(logging.WARNING, logger="daemon.bus.streams.eventsink"):
        mirror.submit(event(1))
        assert mirror.flush()
    assert "1 event(s) not written to Redis" in caplog.text
    (day,) = (tmp_path / "events").glob("*.jsonl")
    assert '"offset":1' in day.read_text()
    mirror.submit(event(2))  # the thread is still alive
    assert mirror.flush()


def test_submit_never_raises_or_blocks_without_sinks() -> None:
    mirror = EventMirror(None, Keys("wt"), None)
    mirror.submit(event(1))
    assert mirror.flush()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.processes
def test_a_forked_child_starts_its_own_thread(real_redis: redis.Redis, tmp_path: Path) -> None:
    mirror = EventMirror(real_redis, Keys("wt"), tmp_path)
    mirror.submit(event(1))  # the parent's thread exists now; a fork does not copy it
    assert mirror.flush()
    pid = os.fork()
    if pid == 0:  # child: like a gunicorn worker forked from a master that had used the mirror
        try:
            mirror.submit(event(2))
            os._exit(0 if mirror.flush(5) else 1)
        except BaseException:  # noqa: BLE001  # the child must never return into pytest
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert real_redis.xlen("wt:events") == 2
