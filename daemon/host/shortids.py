"""Shortened session ids, taken back (README's worktrain command; issue 45): `worktrain top` at 80
columns, the console on a phone and people show an id by its tail (`…08KHC25MX27V`, the
ULID's random part, unique on any screen of sessions), or paste its start. Wherever an id
is taken, a fragment of 4 or more characters that starts or ends exactly one session's id
stands for it; the API resolves it (`GET /api/v2/sessions?id=`), an ambiguous one is an
error that lists the candidates.

Stdlib only: the client commands import it (cli/common.py).
"""

from __future__ import annotations

import re

MIN_CHARS = 4
_ULID_PART = r"[0-9A-HJKMNP-TV-Z]"
FRAGMENT_RE = re.compile(rf"^(?:sess_{_ULID_PART}{{1,26}}|{_ULID_PART}{{{MIN_CHARS},26}})$")
_ELLIPSIS = ("…", "...")


def id_fragment(text: str) -> str | None:
    """The fragment `text` stands for (an ellipsis as `top` prints it dropped, the ULID part
    upper-cased: Crockford base32 reads either case), or None when it cannot be part of an id."""
    value = text.strip()
    for mark in _ELLIPSIS:
        value = value.removeprefix(mark).removesuffix(mark)
    prefix = "sess_" if value[:5].lower() == "sess_" else ""
    value = prefix + value[len(prefix) :].upper()
    if len(value) < MIN_CHARS or len(value) > 31 or not FRAGMENT_RE.fullmatch(value):
        return None
    return value


def matches(session_id: str, fragment: str) -> bool:
    """Whether `fragment` (from `id_fragment`) starts or ends `session_id`."""
    if fragment.startswith("sess_"):
        return session_id.startswith(fragment)
    return session_id[5:].startswith(fragment) or session_id.endswith(fragment)
