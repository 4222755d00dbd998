"""Several bus scripts in one pipelined round trip (daemon/bus/session/attemptevents.py,
daemon/bus/session/eventwriter.py): the events an attempt queued ride with its next worker-side
script, and the writer sends every session's of a process together.

Each call is an `EVALSHA` in a plain (non-transactional) pipeline (`Registered.queue_evalsha`)
and Redis runs them in order, so an attempt's events land before the change that follows
them. Each reply comes back in place, decoded by its script's decoder (daemon/bus/replies.py),
an error as its exception; a script Redis does not have (a restarted or flushed Redis:
`NOSCRIPT`, nothing ran) is loaded and the calls that met it are sent again, in order, once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import redis

from daemon.bus.scripts import BusScripts, LuaScript


@dataclass(frozen=True)
class ScriptCall:
    """One bus script to run: the script (daemon/bus/scripts.py), its KEYS and ARGV."""

    script: LuaScript[Any]
    keys: Sequence[str]
    args: Sequence[Any]


class Riders(Protocol):
    """What rides with a session's next script (SessionChannel.riders: its queued events)."""

    def carry(self, call: ScriptCall, client: redis.Redis, sent_at: float) -> Any:
        """Run `call` with what is queued ahead of it; its decoded reply."""
        ...

    def announcement(self, event: Any) -> str:
        """The JSON of `event` for the script whose outcome it announces to append itself
        (the turn it bound, the receipt it journalled); "" for none."""
        ...

    def appended(self, event: Any, line: str) -> None:
        """A script appended `event` (as `line`) itself: it is not written again when emitted."""
        ...


class Direct:
    """A channel's riders while nothing rides: each script runs alone, no event is announced."""

    def __init__(self, scripts: BusScripts) -> None:
        self.scripts = scripts

    def carry(self, call: ScriptCall, client: redis.Redis, sent_at: float) -> Any:
        return self.scripts.registered(call.script)(call.keys, call.args, client)

    def announcement(self, event: Any) -> str:
        return ""

    def appended(self, event: Any, line: str) -> None:
        return None


def run_calls(client: redis.Redis, scripts: BusScripts, calls: Sequence[ScriptCall]) -> list[Any]:
    """Run `calls` in one round trip: their decoded replies, in order (an error as its exception)."""
    if len(calls) == 1:  # no pipeline's bookkeeping for one script
        call = calls[0]
        try:
            return [scripts.registered(call.script)(call.keys, call.args, client)]
        except redis.ResponseError as exc:
            return [exc]
    answers = _pipelined(client, scripts, calls)
    missing = [call for call, answer in zip(calls, answers, strict=True) if _unloaded(answer)]
    if missing:
        for script in {call.script for call in missing}:
            scripts.registered(script).load(client)
        again = iter(_pipelined(client, scripts, missing))
        answers = [next(again) if _unloaded(answer) else answer for answer in answers]
    return [
        answer if isinstance(answer, Exception) else scripts.registered(call.script).decode(answer)
        for call, answer in zip(calls, answers, strict=True)
    ]


def _unloaded(answer: Any) -> bool:
    return isinstance(answer, redis.exceptions.NoScriptError)


def _pipelined(client: redis.Redis, scripts: BusScripts, calls: Sequence[ScriptCall]) -> list[Any]:
    pipe = client.pipeline(transaction=False)
    for call in calls:
        scripts.registered(call.script).queue_evalsha(pipe, call.keys, call.args)
    return list(pipe.execute(raise_on_error=False))
