"""Where a WorkTrain API server may listen without an API token: loopback addresses only.

Standard library only (ipaddress), so `worktrain up` checks its `--bind` with the very rule
`worktrain web` applies, without importing the web tier (Flask).
"""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    """True for `localhost`, 127.0.0.0/8 and ::1 (with or without brackets)."""
    host = host.strip().strip("[]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve anywhere


class UnsafeBind(Exception):
    """The server was asked to listen beyond loopback without an API token."""


def check_bind(host: str, token: str | None) -> None:
    if token:
        return
    if not is_loopback(host):
        raise UnsafeBind(
            f"refusing to listen on {host!r} without WORKTRAIN_API_TOKEN: anyone who can reach "
            "that address could steer and dispatch agents. Set WORKTRAIN_API_TOKEN, or bind to "
            "127.0.0.1 (WORKTRAIN_BIND / --bind)."
        )
