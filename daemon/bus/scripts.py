"""The bus's Lua scripts: loaded from daemon/bus/lua/*.lua, run with EVALSHA (reloaded on NOSCRIPT).

Each script is `_common.lua` (the shared KEYS layout and helpers) followed by its own file.
redis-py's `Script` sends EVALSHA and, on NOSCRIPT (a restarted or flushed Redis), loads
the source and retries once, so the steady state is one round trip per call.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files
from typing import Any

import redis
from redis.commands.core import Script

from daemon.bus.keys import SessionKeys

SCRIPT_NAMES = (
    "accept",
    "retract",
    "edit",
    "claim",
    "turn_started",
    "turn_ended",
    "take",
    "checkpoint",
    "finish",
    "cancel",
    "heartbeat",
    "release",
    "reap",
    "mark_waiting",
    "emit",
    "request_sent",
    "signal",
    "set_fields",
)

# The scripts a running attempt calls: each takes (worker, attempt, lease_ms) first and is
# refused by the fence in _common.lua when the attempt is no longer the session's.
WORKER_SCRIPTS = (
    "turn_started", "turn_ended", "take", "checkpoint", "finish", "heartbeat", "release", "mark_waiting",
    "emit", "request_sent", "signal", "set_fields",
)  # fmt: skip


# The model-call semaphore's scripts: the prelude `_slots.lua` (its KEYS), not the session's.
SLOT_SCRIPT_NAMES = ("slot_acquire", "slot_release")

# The webhook deliveries' scripts (daemon/bus/webhooks.py): the prelude `_webhooks.lua`.
WEBHOOK_SCRIPT_NAMES = ("webhook_claim", "webhook_settle")

# Scripts on RQ's own keys (worker/giveback.py): no prelude, their KEYS in their header.
RQ_SCRIPT_NAMES = ("give_back",)

# A trigger's scripts (daemon/bus/triggers.py): its own keys only, listed in each header.
TRIGGER_SCRIPT_NAMES = ("trigger_lease", "trigger_release", "trigger_polled", "trigger_record")


@cache
def script_source(name: str) -> str:
    if name in SLOT_SCRIPT_NAMES:
        prelude = "_slots.lua"
    elif name in WEBHOOK_SCRIPT_NAMES:
        prelude = "_webhooks.lua"
    elif name in SCRIPT_NAMES:
        prelude = "_common.lua"
    elif name in RQ_SCRIPT_NAMES or name in TRIGGER_SCRIPT_NAMES:
        prelude = None
    else:
        raise KeyError(f"no Lua script named {name!r}")
    folder = files("daemon.bus.lua")
    own = folder.joinpath(f"{name}.lua").read_text()
    return own if prelude is None else folder.joinpath(prelude).read_text() + "\n" + own


class BusScripts:
    """The registered scripts for one Redis client."""

    def __init__(self, client: redis.Redis) -> None:
        self._scripts: dict[str, Script] = {
            name: client.register_script(script_source(name)) for name in SCRIPT_NAMES
        }

    def script(self, name: str) -> Script:
        """The registered script (its `sha` and `script`): for callers that pipeline EVALSHA."""
        return self._scripts[name]

    def run(
        self,
        name: str,
        keys: SessionKeys,
        args: list[Any],
        client: redis.Redis | None = None,
        extra_keys: tuple[str, ...] = (),
    ) -> Any:
        """`extra_keys` follow the eight session keys (signal.lua's KEYS[9])."""
        return self._scripts[name](keys=[*keys.all(), *extra_keys], args=args, client=client)
