"""Several bus scripts in one pipelined round trip (daemon/bus/attemptevents.py,
daemon/bus/eventwriter.py): the events an attempt queued ride with its next worker-side
script, and the writer sends every session's of a process together.

Each call is an `EVALSHA` in a plain (non-transactional) pipeline — a `Script` object in a
pipeline would add a `SCRIPT EXISTS` round trip to every execute — and Redis runs them in
order, so an attempt's events land before the change that follows them. Each reply comes
back in place, an error as its exception; a script Redis does not have (a restarted or
flushed Redis: `NOSCRIPT`, nothing ran) is loaded and the calls that met it are sent again,
in order, once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import redis

from daemon.bus.scripts import BusScripts


@dataclass(frozen=True)
class ScriptCall:
    """One bus script to run: its name (daemon/bus/scripts.py), its KEYS and ARGV."""

    name: str
    keys: Sequence[str]
    args: Sequence[Any]


class Riders(Protocol):
    """What rides with a session's next script (SessionChannel.riders: its queued events)."""

    def carry(self, script: ScriptCall, client: redis.Redis, sent_at: float) -> Any: ...

    def appended(self, event: Any, line: str) -> None:
        """A script appended `event` (as `line`) itself: it is written when emitted."""


def run_calls(client: redis.Redis, scripts: BusScripts, calls: Sequence[ScriptCall]) -> list[Any]:
    """Run `calls` in one round trip; their replies, in order (an error as its exception)."""
    if len(calls) == 1:  # no pipeline's bookkeeping for one script
        call = calls[0]
        try:
            return [scripts.script(call.name)(keys=list(call.keys), args=list(call.args), client=client)]
        except redis.ResponseError as exc:
            return [exc]
    replies = _pipelined(client, scripts, calls)
    missing = [i for i, reply in enumerate(replies) if isinstance(reply, redis.exceptions.NoScriptError)]
    if missing:
        for name in {calls[i].name for i in missing}:
            script = scripts.script(name)
            script.sha = client.script_load(script.script)
        for i, reply in zip(missing, _pipelined(client, scripts, [calls[i] for i in missing]), strict=True):
            replies[i] = reply
    return replies


def _pipelined(client: redis.Redis, scripts: BusScripts, calls: Sequence[ScriptCall]) -> list[Any]:
    pipe = client.pipeline(transaction=False)
    for call in calls:
        pipe.evalsha(scripts.script(call.name).sha, len(call.keys), *call.keys, *call.args)
    return list(pipe.execute(raise_on_error=False))
