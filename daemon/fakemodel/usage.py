"""The fake's token accounting: a request's size, its context window, and the prompt cache.

Tokens are 4 characters of the request's JSON (tools, system, messages). The prompt cache
is imitated the way the API does it: a request writes the cache up to each of its
`cache_control` breakpoints, and a later request whose prompt starts with such a prefix
reads it (wherever its own breakpoints are). So `usage` looks like the real API's: with a
breakpoint on the last message block (as `daemon.agent.model.wire_request` puts it),
`input_tokens` is only what follows the last breakpoint plus the request's framing
(`FRAMING_TOKENS`) — a handful, never 0 — while `cache_read_input_tokens` and
`cache_creation_input_tokens` carry the rest; a prefix shorter than `MIN_CACHED_TOKENS` is not
cached at all, as the API skips it. A caller that took `input_tokens` for the
request's size would be wrong by orders of magnitude, as it would be against the API.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass
from typing import Any

CHARS_PER_TOKEN = 4
# Counted as input on every request, outside any cached block: the message framing (the API
# reports such a handful of `input_tokens` even when every block before them was cached)
FRAMING_TOKENS = 3
# The shortest prefix the API caches (Sonnet's; below it a breakpoint writes nothing and the
# whole prompt is input, silently)
MIN_CACHED_TOKENS = 1024


def _strip(value: Any) -> Any:
    """A block without its `cache_control` marker: the marker is not part of the prefix."""
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _marked(value: Any) -> bool:
    if isinstance(value, dict):
        return "cache_control" in value or any(_marked(v) for v in value.values())
    if isinstance(value, list):
        return any(_marked(v) for v in value)
    return False


def segments(body: dict[str, Any]) -> list[tuple[str, bool]]:
    """The prompt in cacheable order (tools, system, messages): (canonical JSON, breakpoint after it)."""
    system = body.get("system") or []
    if isinstance(system, str):
        system = [{"type": "text", "text": system}]
    units = [*(body.get("tools") or []), *system, *(body.get("messages") or [])]
    return [(json.dumps(_strip(unit), sort_keys=True), _marked(unit)) for unit in units]


def prompt_tokens(body: dict[str, Any]) -> int:
    return sum(len(text) for text, _ in segments(body)) // CHARS_PER_TOKEN


@dataclass(frozen=True)
class PromptUsage:
    total: int  # the prompt's tokens: input + cache_read + cache_write
    input_tokens: int
    cache_read: int
    cache_write: int


class PromptCache:
    """Prefixes written at breakpoints, by hash; thread-safe."""

    def __init__(self) -> None:
        self._written: set[bytes] = set()
        self._lock = threading.Lock()

    def usage(self, body: dict[str, Any]) -> PromptUsage:
        digest = hashlib.blake2b(digest_size=16)
        chars = 0
        read = last_break = 0
        breaks: list[bytes] = []
        with self._lock:
            for text, breakpoint in segments(body):
                digest.update(text.encode())
                chars += len(text)
                key = digest.copy().digest()
                if key in self._written:  # a hit is found at any boundary before a breakpoint
                    read = chars
                if breakpoint and chars // CHARS_PER_TOKEN >= MIN_CACHED_TOKENS:
                    breaks.append(key)
                    last_break = chars
            self._written.update(breaks)
        total = chars // CHARS_PER_TOKEN + FRAMING_TOKENS
        cache_read = read // CHARS_PER_TOKEN
        cache_write = max(last_break // CHARS_PER_TOKEN - cache_read, 0)
        return PromptUsage(total, max(total - cache_read - cache_write, 0), cache_read, cache_write)
