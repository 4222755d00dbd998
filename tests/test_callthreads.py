"""daemon/turn/callthreads.py: interruptible calls run on kept threads, reused, never lost."""

from __future__ import annotations

import os
import threading
import time

import pytest

from daemon.turn import callthreads
from daemon.turn.callthreads import CallThreads

pytestmark = pytest.mark.unit


def test_a_call_reuses_an_idle_thread_and_a_busy_pool_grows() -> None:
    pool = CallThreads("t")
    done = threading.Event()
    pool.run(done.set)
    assert done.wait(5)
    deadline = time.monotonic() + 5
    while pool.idle_count == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    names: list[str] = []
    again = threading.Event()
    pool.run(lambda: (names.append(threading.current_thread().name), again.set()))
    assert again.wait(5)
    assert pool.started == 1 and names == ["t-1"]  # the same thread ran both
    release = threading.Event()
    started = [threading.Event() for _ in range(3)]
    for event in started:
        pool.run(lambda e=event: (e.set(), release.wait(5)))  # type: ignore[misc]
    assert all(event.wait(5) for event in started)  # three at once: the pool grew to three
    assert pool.started == 3 and pool.busy == 3
    release.set()


def test_an_idle_thread_ends_after_the_idle_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(callthreads, "IDLE_SECONDS", 0.05)
    pool = CallThreads("idle")
    done = threading.Event()
    pool.run(done.set)
    assert done.wait(5)
    deadline = time.monotonic() + 5
    while any(t.name == "idle-1" for t in threading.enumerate()):
        assert time.monotonic() < deadline, "the idle thread did not end"
        time.sleep(0.01)
    assert pool.idle_count == 0
    after = threading.Event()
    pool.run(after.set)  # a new thread, not the ended one
    assert after.wait(5) and pool.started == 2


@pytest.mark.processes
def test_a_forked_child_does_not_hand_calls_to_its_parents_threads() -> None:
    pool = callthreads.CALL_THREADS
    done = threading.Event()
    pool.run(done.set)
    assert done.wait(5)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a call must still run
        ran = threading.Event()
        pool.run(ran.set)
        os.write(write, b"1" if ran.wait(5) else b"0")
        os._exit(0)
    os.close(write)
    assert os.read(read, 1) == b"1"
    os.waitpid(pid, 0)
