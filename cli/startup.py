"""What starting the stack shares between the supervisor (cli/supervisor.py) and the pieces
it starts (cli/embedded.py): its two errors and the port check. A module of its own so the
supervisor can import the pieces without the pieces importing the supervisor."""

from __future__ import annotations

import socket


class StackFailed(RuntimeError):
    """The stack could not start, or a child died: the message says which and why."""


class Interrupted(Exception):
    """A stop was requested while the stack was still starting."""


def port_in_use(host: str, port: int) -> bool:
    host = host.strip("[]")
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False
