"""Who may serve the WorkTrain API where (docs/security.md): the address, the token, the Host.

- Without an API token a server listens on loopback only, and answers only requests whose
  `Host` is a loopback name (`is_loopback_host`: a page on another site cannot reach it by
  DNS rebinding).
- A token must be worth having: at least `MIN_TOKEN_LENGTH` printable ASCII characters,
  not a known placeholder, at least 128 bits of estimated entropy (`token_problem`,
  daemon/host/tokenstrength.py).
- The address must be one the server can bind: an IP address, or `localhost`
  (`normalize_bind`), checked before any server starts so a typo is a sentence, not a
  traceback.

Standard library only (ipaddress), so `worktrain up` checks its `--bind` with the very rule
`worktrain web` applies, without importing the web tier (Flask).
"""

from __future__ import annotations

import functools
import ipaddress
import re

from daemon.host.tokenstrength import weakness

MIN_TOKEN_LENGTH = 32
# Compared with letters and digits only, lower case: `Change_Me`, `change-me` and `CHANGEME` alike.
PLACEHOLDERS = frozenset(
    {
        "changeme", "secret", "token", "password", "passwd", "apitoken", "yourtoken", "mytoken",
        "example", "test", "testing", "default", "admin", "letmein", "worktrain", "xxxxxxxx",
        "replaceme", "setme", "todo", "none", "null",
    }
)  # fmt: skip
_PLACEHOLDER_PARTS = ("changeme", "replaceme", "yourtoken", "placeholder", "example")
MIN_DISTINCT_CHARACTERS = 8


def is_loopback(host: str) -> bool:
    """True for `localhost`, 127.0.0.0/8 and ::1 (with or without brackets)."""
    host = host.strip().strip("[]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve anywhere


_HOST_HEADER_RE = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(?::[0-9]{1,5})?", re.ASCII)


@functools.lru_cache(maxsize=1024)  # a server sees the same few Host values on every request
def is_loopback_host(header: str) -> bool:
    """Whether a `Host` header names this machine's loopback: `localhost`, `127.x.x.x` or
    `[::1]`, with or without a port. Anything else (a DNS name that rebinds to 127.0.0.1,
    `localhost.`, an unbracketed IPv6 address, garbage) is not."""
    match = _HOST_HEADER_RE.fullmatch(header)
    if match is None:
        return False
    host = match[1]
    if host.startswith("["):
        return is_loopback(host) and ":" in host
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.IPv4Address(host).is_loopback
    except ValueError:
        return False


class UnsafeBind(Exception):
    """The server would listen where it must not, or with a token not worth having."""


def token_problem(token: str) -> str | None:
    """Why `token` is too weak to protect an API, or None when it is fine."""
    if not (token.isascii() and token.isprintable()) or token.strip() != token:
        return "it must be printable ASCII without surrounding spaces"
    if len(token) < MIN_TOKEN_LENGTH:
        return f"it is {len(token)} characters long; use at least {MIN_TOKEN_LENGTH}"
    folded = re.sub(r"[^a-z0-9]", "", token.lower())
    if folded in PLACEHOLDERS or any(part in folded for part in _PLACEHOLDER_PARTS):
        return "it is a placeholder"
    if len(set(token)) < MIN_DISTINCT_CHARACTERS:
        return f"it uses fewer than {MIN_DISTINCT_CHARACTERS} distinct characters"
    return weakness(token)


TOKEN_HINT = 'Make one with: python -c "import secrets; print(secrets.token_urlsafe(32))"'


def normalize_bind(host: str) -> str:
    """The IP address a server can bind for `host` (`localhost` is 127.0.0.1); UnsafeBind
    with a sentence for anything else (a host name, a scoped IPv6 address, stray spaces)."""
    bare = host.strip("[]")
    if bare.lower() == "localhost":
        return "127.0.0.1"
    if "%" in bare:
        raise UnsafeBind(f"--bind {host!r}: scoped IPv6 addresses (with %) are not supported")
    try:
        return str(ipaddress.ip_address(bare))
    except ValueError:
        raise UnsafeBind(
            f"--bind {host!r} is not an IP address: give one (127.0.0.1, 0.0.0.0, ::1, ...) or localhost"
        ) from None


def check_bind(host: str, token: str | None) -> str:
    """The address to listen on (normalized), after the docs/security.md checks; UnsafeBind if not."""
    address = normalize_bind(host)
    if token:
        problem = token_problem(token)
        if problem is not None:
            raise UnsafeBind(f"refusing to start: WORKTRAIN_API_TOKEN is too weak ({problem}). {TOKEN_HINT}")
        return address
    if not is_loopback(address):
        raise UnsafeBind(
            f"refusing to listen on {host!r} without WORKTRAIN_API_TOKEN: anyone who can reach "
            "that address could steer and dispatch agents. Set WORKTRAIN_API_TOKEN, or bind to "
            "127.0.0.1 (WORKTRAIN_BIND / --bind)."
        )
    return address
