"""The bus's Lua scripts: loaded from daemon/lua/*.lua, run with EVALSHA (reloaded on NOSCRIPT).

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

from daemon.keys import SessionKeys

SCRIPT_NAMES = (
    "accept",
    "claim",
    "turn_started",
    "turn_ended",
    "checkpoint",
    "finish",
    "cancel",
    "heartbeat",
    "release",
    "mark_orphan",
    "mark_waiting",
)


# Scripts on global keys, with a KEYS layout of their own (in each header): no session prelude.
GLOBAL_SCRIPT_NAMES = ("slot_acquire", "slot_release")


@cache
def script_source(name: str) -> str:
    folder = files("daemon.lua")
    if name in GLOBAL_SCRIPT_NAMES:
        return folder.joinpath(f"{name}.lua").read_text()
    if name not in SCRIPT_NAMES:
        raise KeyError(f"no Lua script named {name!r}")
    return folder.joinpath("_common.lua").read_text() + "\n" + folder.joinpath(f"{name}.lua").read_text()


class BusScripts:
    """The registered scripts for one Redis client."""

    def __init__(self, client: redis.Redis) -> None:
        self._scripts: dict[str, Script] = {
            name: client.register_script(script_source(name)) for name in SCRIPT_NAMES
        }

    def run(
        self,
        name: str,
        keys: SessionKeys,
        args: list[Any],
        client: redis.Redis | None = None,
    ) -> Any:
        return self._scripts[name](keys=keys.all(), args=args, client=client)
