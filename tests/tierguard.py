"""The cheap tiers keep their promise (tests/tiers.py): a `unit` test that connects or binds a
socket or starts a process fails, and so does a `redis` test that starts a process.

A process-wide audit hook (sys.addaudithook: it cannot be removed, so it is installed once
and armed only while a guarded test's setup, call and teardown run) refuses the call: it
raises TierViolation where it was made, and the test fails after its phase even if the code
under test swallowed that error. Session-wide fixtures are left alone (the first test to need
one sets it up, whatever its tier: `redis_server` starts the session's redis-server from a
redis test's setup). Only the pytest thread and the threads started during the test are
watched: a thread an earlier (redis, e2e) test left running is not this test's doing.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.tiers import tier_of

SOCKETS = {
    "socket.connect": "connected a socket to",
    "socket.bind": "bound a socket to",
    "socket.sendto": "sent a datagram to",
}
PROCESSES = {
    "subprocess.Popen": "started a process:",
    "os.posix_spawn": "started a process:",
    "os.exec": "replaced itself with a process:",
    "os.system": "ran a shell command:",
    "os.fork": "forked",
    "os.forkpty": "forked",
    "pty.spawn": "started a process:",
}
REFUSED = {"unit": {**SOCKETS, **PROCESSES}, "redis": PROCESSES}
PROMISE = {
    "unit": "no process, no socket, no real Redis",
    "redis": "a real redis-server or another socket, but no process of its own",
}
ALLOWED_BY = {  # the tiers a test that did this may have, cheapest first
    "socket": ("redis", "`redis` (a real redis-server or another socket), `processes` or `e2e`"),
    "process": ("processes", "`processes` (child processes) or `e2e`"),
}


class TierViolation(RuntimeError):
    """Raised where a test does what its tier rules out (not what that code expects)."""


@dataclass
class Guard:
    item: pytest.Item | None = None
    refused: dict[str, str] = field(default_factory=dict)
    foreign: frozenset[int] = frozenset()  # threads alive before the test began
    violations: list[tuple[str, str]] = field(default_factory=list)  # (what, socket|process)

    def hook(self, event: str, args: tuple[Any, ...]) -> None:
        if self.item is None or event not in self.refused or threading.get_ident() in self.foreign:
            return
        what = f"{self.refused[event]} {describe(event, args)}".strip()
        thread = threading.current_thread()
        if thread is not threading.main_thread():
            what += f" (in thread {thread.name})"
        kind = "socket" if event in SOCKETS else "process"
        self.violations.append((what, kind))
        raise TierViolation(message(self.item, what, kind))


def describe(event: str, args: tuple[Any, ...]) -> str:
    if event in ("socket.connect", "socket.bind"):
        return repr(args[1])
    if event == "socket.sendto":
        return repr(args[-1])
    if event in ("subprocess.Popen", "os.posix_spawn", "os.exec"):
        return repr(args[1])[:200]
    if event == "os.system":
        return repr(args[0])[:200]
    return ""


def message(item: pytest.Item, what: str, kind: str) -> str:
    tier = tier_of(item) or "?"
    where = item.path.relative_to(item.config.rootpath)
    cheapest, allowed = ALLOWED_BY[kind]
    return (
        f"a {tier} test {what}: {item.nodeid} is in the {tier} tier ({PROMISE.get(tier, '')}). "
        f"If it needs this, give it the tier it needs: {allowed}, e.g. "
        f"`pytestmark = pytest.mark.{cheapest}` at the top of {where}, or @pytest.mark.{cheapest} "
        f"on the test itself, or @fixture_tier(...) on the fixture that does it (tests/tiers.py)"
    )


GUARD = Guard()


def install() -> None:
    sys.addaudithook(GUARD.hook)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    main = threading.main_thread()
    GUARD.foreign = frozenset(t.ident for t in threading.enumerate() if t is not main and t.ident)
    GUARD.violations = []
    return (yield from guarded(item))


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef[Any]) -> Iterator[Any]:
    if fixturedef.scope not in ("session", "package"):
        return (yield)
    armed, GUARD.item = GUARD.item, None
    try:
        return (yield)
    finally:
        GUARD.item = armed


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    return (yield from guarded(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    # Past the module's last test, teardown also stops module and session fixtures (the
    # session's redis-server): not this test's doing.
    same_module = nextitem is not None and nextitem.path == item.path
    return (yield from guarded(item if same_module else None))


def guarded(item: pytest.Item | None) -> Iterator[None]:
    refused = REFUSED.get(tier_of(item) or "") if item is not None else None
    GUARD.item, GUARD.refused = (item, refused) if refused else (None, {})
    try:
        return (yield)
    except BaseException:
        if not GUARD.violations:
            raise
        # else the refusal is the story, whatever the code under test made of it
    finally:
        GUARD.item = None
        if refused and GUARD.violations:
            assert item is not None
            found, GUARD.violations = GUARD.violations, []
            what, kind = found[0]
            more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
            raise pytest.fail.Exception(message(item, what + more, kind), pytrace=False) from None
