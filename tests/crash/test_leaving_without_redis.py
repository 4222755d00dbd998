"""A worker tier whose Redis is gone exits within 10 s of SIGTERM (docs/durability.md, "Partitions").

With redis-py 8.1 every threaded worker's exit threw in `worker/leaving.py` (`AttributeError:
'BlockingConnectionPool' object has no attribute '_available_connections'`), so
`presence.leave()` never ran, and a tier whose Redis was gone ignored SIGTERM for 40 s+.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from collections.abc import Callable

import pytest

from tests.crash.harness import Stack

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(120)
@pytest.mark.parametrize("concurrency", [1, 4])
def test_sigterm_with_redis_gone_exits_in_10_s(make_stack: Callable[..., Stack], concurrency: int) -> None:
    stack = make_stack(concurrency=concurrency)
    stack.start(workers=1, processes=2)
    assert stack.redis_server is not None
    worker = stack.proc("worker1")
    time.sleep(1.0)
    stack.redis_server.kill()
    started = time.monotonic()
    worker.process.send_signal(signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        worker.process.wait(15)
    took = time.monotonic() - started
    log = worker.log(40000)
    print(f"concurrency={concurrency} exit after SIGTERM with Redis gone: {took:.1f}s")
    assert worker.process.poll() is not None and took < 10, f"still running after {took:.1f} s\n{log[-3000:]}"
    assert "_available_connections" not in log and "AttributeError" not in log, log[-3000:]
