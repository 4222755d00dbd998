"""Bring `lo` up in a command's own network namespace (docs/security.md, `WORKTRAIN_SANDBOX_NETWORK=none`).

Runs in the launcher while it still holds CAP_NET_ADMIN in that namespace. `_socket` (the C
module) rather than `socket`: the launcher starts before every command, and `socket`'s
enums cost it more than the rest of its work.
"""

from __future__ import annotations

import _socket
import fcntl
import struct

_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_IFREQ = "16sH14x"  # struct ifreq: the name, then ifr_flags


def loopback_up() -> None:
    """Its own 127.0.0.1 and ::1, up."""
    sock = _socket.socket(_socket.AF_INET, _socket.SOCK_DGRAM)
    try:
        current = fcntl.ioctl(sock.fileno(), _SIOCGIFFLAGS, struct.pack(_IFREQ, b"lo", 0))
        flags = struct.unpack(_IFREQ, current)[1]
        fcntl.ioctl(sock.fileno(), _SIOCSIFFLAGS, struct.pack(_IFREQ, b"lo", flags | _IFF_UP))
    finally:
        sock.close()
