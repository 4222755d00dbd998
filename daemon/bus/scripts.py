"""The bus's Lua scripts: loaded from daemon/bus/lua/*.lua, run with EVALSHA (reloaded on NOSCRIPT).

Each script is declared once below: its file, the prelude it follows (`_common.lua`, the
session's KEYS and helpers; `_slots.lua`; `_webhooks.lua`; or none, its KEYS in its own
header) and the decoder of its reply (daemon/bus/replies.py). Running one answers that
decoder's typed value, never the array Redis sent (`BusScripts.run`, `Registered`).
redis-py's `Script` sends EVALSHA and, on NOSCRIPT (a restarted or flushed Redis), loads
the source and retries once, so the steady state is one round trip per call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import Any, Generic, TypeVar

import redis
from redis.client import Pipeline

from daemon.bus import replies
from daemon.bus.keys import SessionKeys
from daemon.bus.replies import (
    Accepted,
    CancelAnswer,
    Changed,
    FenceRefusal,
    LeaseCheck,
    PollLease,
    Reaped,
    SignalStored,
    SlotAnswer,
    Taken,
    fenced,
)

R = TypeVar("R")
T = TypeVar("T")

COMMON, SLOTS, WEBHOOKS = "_common.lua", "_slots.lua", "_webhooks.lua"


@dataclass(frozen=True, slots=True)
class LuaScript(Generic[R]):
    """One script: `daemon/bus/lua/<name>.lua` after its prelude, and its reply's decoder."""

    name: str
    decode: Callable[[Any], R]  # quotes the `Returns` line of the script's header
    prelude: str | None = COMMON

    @property
    def source(self) -> str:
        return _source(self.name, self.prelude)


class WorkerScript(LuaScript[T | FenceRefusal]):
    """A script a running attempt calls: it takes (worker, attempt, lease_ms) first and is
    refused, `{'fenced', reason}` and nothing written, by the fence in _common.lua once the
    attempt is no longer the session's (`SessionChannel.answer` raises `Fenced` on it)."""

    __slots__ = ()


def worker_script(name: str, decode: Callable[[Any], T]) -> WorkerScript[T]:
    """The worker-side script `name`: its refusal, else what `decode` reads."""
    script: WorkerScript[T] = WorkerScript(name, fenced(decode))
    return script


@cache
def _source(name: str, prelude: str | None) -> str:
    folder = files("daemon.bus.lua")
    own = folder.joinpath(f"{name}.lua").read_text()
    return own if prelude is None else folder.joinpath(prelude).read_text() + "\n" + own


# The coordinator's session scripts: the eight session keys (_common.lua), no fence.
ACCEPT = LuaScript("accept", Accepted.decode)
RETRACT = LuaScript("retract", Changed.decode)
EDIT = LuaScript("edit", Changed.decode)
CANCEL = LuaScript("cancel", CancelAnswer.decode)
CLAIM = LuaScript("claim", replies.claimed)
REAP = LuaScript("reap", Reaped.decode)

# The scripts a running attempt calls: each takes (worker, attempt, lease_ms) first and is
# refused by the fence in _common.lua when the attempt is no longer the session's.
TURN_STARTED = worker_script("turn_started", replies.turn_started)
TURN_ENDED = worker_script("turn_ended", replies.drained)
TAKE = worker_script("take", Taken.decode)
CHECKPOINT = worker_script("checkpoint", replies.ok)
FINISH = worker_script("finish", replies.undelivered)
HEARTBEAT = worker_script("heartbeat", LeaseCheck.decode)
RELEASE = worker_script("release", replies.job_number)
MARK_WAITING = worker_script("mark_waiting", replies.ok)
EMIT = worker_script("emit", replies.ok)
REQUEST_SENT = worker_script("request_sent", replies.receipt_offsets)
SIGNAL = worker_script("signal", SignalStored.decode)
SET_FIELDS = worker_script("set_fields", replies.ok)

WORKER_SCRIPTS: tuple[WorkerScript[Any], ...] = (
    TURN_STARTED, TURN_ENDED, TAKE, CHECKPOINT, FINISH, HEARTBEAT, RELEASE, MARK_WAITING,
    EMIT, REQUEST_SENT, SIGNAL, SET_FIELDS,
)  # fmt: skip
SESSION_SCRIPTS: tuple[LuaScript[Any], ...] = (ACCEPT, RETRACT, EDIT, CLAIM, CANCEL, REAP, *WORKER_SCRIPTS)

# The model-call semaphore's (daemon/bus/fleet/modelslots.py): the prelude `_slots.lua` (its KEYS).
SLOT_ACQUIRE = LuaScript("slot_acquire", SlotAnswer.decode, SLOTS)
SLOT_RELEASE = LuaScript("slot_release", replies.one_or_zero, SLOTS)

# The webhook deliveries' (daemon/bus/outbox/webhooks.py): the prelude `_webhooks.lua`.
WEBHOOK_CLAIM = LuaScript("webhook_claim", replies.texts, WEBHOOKS)
WEBHOOK_SETTLE = LuaScript("webhook_settle", replies.settle_stored, WEBHOOKS)

# A trigger's (daemon/bus/fleet/triggers.py): its own keys only, listed in each header.
TRIGGER_LEASE = LuaScript("trigger_lease", PollLease.decode, None)
TRIGGER_RELEASE = LuaScript("trigger_release", replies.one_or_zero, None)
TRIGGER_POLLED = LuaScript("trigger_polled", replies.poll_recorded, None)
TRIGGER_RECORD = LuaScript("trigger_record", replies.first_record, None)

# On RQ's own keys (worker/giveback.py): no prelude, its KEYS in its header.
GIVE_BACK = LuaScript("give_back", replies.one_or_zero, None)

ALL_SCRIPTS: tuple[LuaScript[Any], ...] = (
    *SESSION_SCRIPTS, SLOT_ACQUIRE, SLOT_RELEASE, WEBHOOK_CLAIM, WEBHOOK_SETTLE,
    TRIGGER_LEASE, TRIGGER_RELEASE, TRIGGER_POLLED, TRIGGER_RECORD, GIVE_BACK,
)  # fmt: skip
BY_NAME: dict[str, LuaScript[Any]] = {script.name: script for script in ALL_SCRIPTS}


def script_source(name: str) -> str:
    """The source EVALSHA runs for the script `name` (its prelude first)."""
    if name not in BY_NAME:
        raise KeyError(f"no Lua script named {name!r}")
    return BY_NAME[name].source


class Registered(Generic[R]):
    """One script registered on one client: each run answers its decoded reply."""

    def __init__(self, script: LuaScript[R], client: redis.Redis) -> None:
        self.script = script
        self.client = client
        self._script = client.register_script(script.source)

    def __call__(self, keys: Sequence[str], args: Sequence[Any], client: redis.Redis | None = None) -> R:
        """Run it (on `client`, else the one it was registered on)."""
        return self.script.decode(self._script(keys=list(keys), args=list(args), client=client))

    def queue(self, pipe: Pipeline, keys: Sequence[str], args: Sequence[Any]) -> None:
        """Queue it in a caller's transaction (loaded first if Redis lacks it); its reply is
        the transaction's, which the caller discards."""
        self._script(keys=list(keys), args=list(args), client=pipe)

    def queue_evalsha(self, pipe: Pipeline, keys: Sequence[str], args: Sequence[Any]) -> None:
        """Queue a bare EVALSHA in a plain pipeline: many runs in one round trip (a `Script`
        in a pipeline would add a SCRIPT EXISTS round trip to every execute). Read each reply
        with `decode`; on NoScriptError, `load()` and send again (a refused EVALSHA ran nothing)."""
        pipe.evalsha(self._script.sha, len(keys), *keys, *args)

    def decode(self, raw: Any) -> R:
        return self.script.decode(raw)

    def load(self, client: redis.Redis | None = None) -> None:
        """Load the source again: a restarted or flushed Redis answered NOSCRIPT."""
        self._script.sha = (client or self.client).script_load(self.script.source)


class BusScripts:
    """The session scripts (SESSION_SCRIPTS), registered for one Redis client."""

    def __init__(self, client: redis.Redis) -> None:
        self._registered: dict[str, Registered[Any]] = {
            script.name: Registered(script, client) for script in SESSION_SCRIPTS
        }

    def registered(self, script: LuaScript[R]) -> Registered[R]:
        """The script registered here: for callers that pipeline its EVALSHA."""
        found: Registered[R] = self._registered[script.name]
        return found

    def run(
        self,
        script: LuaScript[R],
        keys: SessionKeys,
        args: Sequence[Any],
        client: redis.Redis | None = None,
        extra_keys: tuple[str, ...] = (),
    ) -> R:
        """Its decoded reply. `extra_keys` follow the eight session keys (signal.lua's KEYS[9])."""
        return self.registered(script)([*keys.all(), *extra_keys], args, client)

    def queue(self, pipe: Pipeline, script: LuaScript[Any], keys: SessionKeys, args: Sequence[Any]) -> None:
        """Queue it in a caller's transaction (`Registered.queue`)."""
        self.registered(script).queue(pipe, keys.all(), args)
