"""Session ids: `sess_` + a 26-char Crockford-base32 ULID, validated at every boundary."""

from __future__ import annotations

import re

from ulid import ULID

SESSION_ID_RE = re.compile(r"^sess_[0-9A-HJKMNP-TV-Z]{26}$")
CLIENT_MSG_ID_RE = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
# A dispatch `Idempotency-Key` (README's HTTP API) has the same shape as a clientMsgId.
IDEMPOTENCY_KEY_RE = CLIENT_MSG_ID_RE
# A trigger's id in the triggers file (README's Triggers): it names Redis keys and URL paths.
TRIGGER_ID_RE = re.compile(r"^[a-z0-9-]{1,64}$")


class InvalidSessionId(ValueError):
    """A string that is not a session id reached a place that needs one."""


def new_session_id() -> str:
    return f"sess_{ULID()}"


def is_session_id(value: object) -> bool:
    return isinstance(value, str) and SESSION_ID_RE.fullmatch(value) is not None


def require_session_id(value: str) -> str:
    if not is_session_id(value):
        raise InvalidSessionId(f"not a session id: {value[:80]!r}")
    return value


def require_idempotency_key(value: str) -> str:
    if IDEMPOTENCY_KEY_RE.fullmatch(value) is None:
        raise ValueError(f"not an idempotency key: {value[:80]!r}")
    return value


def is_trigger_id(value: object) -> bool:
    return isinstance(value, str) and TRIGGER_ID_RE.fullmatch(value) is not None


def require_trigger_id(value: str) -> str:
    if not is_trigger_id(value):
        raise ValueError(f"not a trigger id: {value[:80]!r}")
    return value
