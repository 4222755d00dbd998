"""The web server owns its port alone (docs/security.md).

granian, left to itself, has every worker process bind its own socket with `SO_REUSEPORT`
(granian's `ListenerSpec`, on Linux): it starts silently on a port another program already
listens on, and any process of the same user can later bind the same port with
`SO_REUSEPORT` and receive a share of the connections — an agent's Bash did, and recorded
the `Authorization` headers of 11 requests out of 30.

So `worktrain web` binds the one listening socket itself, without `SO_REUSEPORT`
(`SO_REUSEADDR` only, which on Linux never lets a second socket bind a port in LISTEN
state): a port in use is a clear error (`PortInUse`) before any worker starts, and while
the server runs no other socket can join its port. The granian workers inherit that socket
(`OwnSocketGranian`: granian's own path for a pre-built shared socket, `SocketHolder`,
which the workers `listen()` on) instead of building theirs. gunicorn never sets
`SO_REUSEPORT` (its `reuse_port` is off); `check_port_free` gives it the same clear error.
"""

from __future__ import annotations

import errno
import socket
from typing import Any

BACKLOG = 1024


class PortInUse(Exception):
    """Another process already listens on the address the server was asked to use."""


def bind_listener(host: str, port: int) -> socket.socket:
    """A TCP socket bound to (host, port) without SO_REUSEPORT, not yet listening; PortInUse
    when another socket holds the port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # restarts past TIME_WAIT
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
        # Listen at once: from here no other socket can bind this port, SO_REUSEADDR or not.
        sock.listen(BACKLOG)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise PortInUse(
                f"refusing to start: port {port} on {host} is already in use by another process. "
                "Stop it, or pick another port (--port / WORKTRAIN_PORT)."
            ) from None
        raise
    return sock


def check_port_free(host: str, port: int) -> None:
    """PortInUse when another process listens on (host, port) (gunicorn binds it itself)."""
    bind_listener(host, port).close()


def own_socket_granian() -> type[Any]:
    """granian's multi-process server class, serving on a socket this process bound."""
    from granian._granian import SocketHolder
    from granian.server.mp import MPServer

    from daemon.host.prctl import WEB_COMM, set_process_name

    class OwnSocketGranian(MPServer):
        """`MPServer` whose shared socket is `bind_listener`'s (no SO_REUSEPORT)."""

        listener: socket.socket | None = None

        def _init_shared_socket(self) -> None:
            set_process_name(WEB_COMM)  # after granian's retitle, which set comm to its first 15 bytes
            if self.listener is None:  # first start: bind here, so a port in use fails now
                self.listener = bind_listener(self.bind_addr, self.bind_port)
            self.listener.set_inheritable(True)
            fd = self.listener.fileno()
            # On Linux granian's SocketHolder is (fd, uds, backlog); its stub names the other
            # platforms' (fd, uds) only.
            holder: Any = SocketHolder(fd, False, self.backlog)  # type: ignore[call-arg]
            self._ssp = None
            self._sfd: Any = fd
            self._shd: Any = holder
            self._sso = self.listener

        def _drop_shared_socket(self) -> None:
            if self.listener is not None:
                self.listener.close()
                self.listener = None

    return OwnSocketGranian
