"""A TCP proxy that loses traffic the way a flaky network does, for the fault tests.

It sits between WorkTrain's tiers and Redis (they get its address as REDIS_URL) and, while
`lossy` is on, drops a fraction of what passes through, each time resetting the connection
(RST: the client sees ECONNRESET at once, as when a NAT or a load balancer drops a flow):

- a request chunk (client -> Redis) is dropped *before* Redis sees it: the command never ran;
- a reply chunk (Redis -> client) is dropped *after* Redis ran the command: it ran, and the
  client cannot know. This is the ambiguous failure every retry must survive.

`partition(mode)` cuts the tiers behind it off from Redis altogether until `heal()`:
"reset" resets every connection and every new one at once (ECONNRESET, as a firewall that
rejects); "blackhole" keeps connections open and forwards nothing, answering nothing (a
silent drop: the client learns only from its own timeouts). `partition(mode, only=ips)`
cuts only the connections coming from those loopback addresses (127.0.0.2, ...): a Redis
primary cut off from its replicas and sentinels, which bind other loopback addresses
(tests/crash/sentinels.py), while its clients on 127.0.0.1 still reach it. With
`as_peer=True` the proxy connects upstream from the client's own address, so Redis sees
who is asking (a replica's address, as the sentinels then learn it).

Decisions come from one `random.Random` per connection and direction, seeded from the
proxy's seed and the connection's ordinal: a seed fixes the sequence of drop decisions each
connection meets (thread timing still decides which bytes they fall on).
"""

from __future__ import annotations

import contextlib
import random
import socket
import struct
import threading
from dataclasses import dataclass, field


@dataclass
class LossStats:
    connections: int = 0
    requests_dropped: int = 0
    replies_dropped: int = 0
    chunks: int = 0

    def line(self) -> str:
        return (
            f"connections={self.connections} chunks={self.chunks} "
            f"requests_dropped={self.requests_dropped} replies_dropped={self.replies_dropped}"
        )


def reset(sock: socket.socket) -> None:
    """Close with RST instead of FIN (SO_LINGER 0). shutdown(SHUT_RD) first wakes the other
    pump thread blocked in recv() on this socket: a close() alone would not, and the socket
    (and the RST) would wait for that recv to return."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RD)
    with contextlib.suppress(OSError):
        sock.close()


@dataclass
class LossyProxy:
    target_port: int
    seed: int
    drop_requests: float = 0.02
    drop_replies: float = 0.02
    lossy: bool = False
    stats: LossStats = field(default_factory=LossStats)
    port: int = 0
    _listener: socket.socket | None = None
    _open: set[socket.socket] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _closed: bool = False
    partitioned: str | None = None  # None, "reset" or "blackhole"
    cut_from: frozenset[str] | None = None  # the client addresses a partition cuts (None: all)
    as_peer: bool = False
    _peers: dict[socket.socket, str] = field(default_factory=dict)

    def partition(self, mode: str, only: frozenset[str] | None = None) -> None:
        assert mode in ("reset", "blackhole"), mode
        with self._lock:
            self.partitioned = mode
            self.cut_from = only
            socks = (
                [sock for sock in self._open if self._cut(self._peers.get(sock, ""))]
                if mode == "reset"
                else []
            )
        for sock in socks:
            reset(sock)

    def heal(self) -> None:
        with self._lock:
            self.partitioned = None
            self.cut_from = None

    def _cut(self, peer: str) -> bool:
        return self.partitioned is not None and (self.cut_from is None or peer in self.cut_from)

    def mode_for(self, peer: str) -> str | None:
        """The partition a connection from `peer` is under now (None: it passes)."""
        return self.partitioned if self._cut(peer) else None

    def start(self) -> LossyProxy:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(512)
        self._listener = listener
        self.port = listener.getsockname()[1]
        threading.Thread(target=self._accept, name="lossy-accept", daemon=True).start()
        return self

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def close(self) -> None:
        with self._lock:
            self._closed = True
            socks = list(self._open)
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.close()
        for sock in socks:
            reset(sock)

    def _accept(self) -> None:
        assert self._listener is not None
        while True:
            try:
                client, (peer, _) = self._listener.accept()
            except OSError:
                return  # closed
            if self.mode_for(peer) == "reset":
                reset(client)
                continue
            try:
                source = (peer, 0) if self.as_peer else None
                upstream = socket.create_connection(
                    ("127.0.0.1", self.target_port), timeout=5, source_address=source
                )
            except OSError:
                reset(client)
                continue
            upstream.settimeout(None)
            with self._lock:
                if self._closed:
                    reset(client)
                    reset(upstream)
                    return
                self.stats.connections += 1
                n = self.stats.connections
                self._open.update((client, upstream))
                self._peers.update({client: peer, upstream: peer})
            pair = (client, upstream)
            for src, dst, direction in ((client, upstream, "request"), (upstream, client, "reply")):
                rng = random.Random(f"{self.seed}:{n}:{direction}")
                threading.Thread(
                    target=self._pump, args=(src, dst, direction, rng, pair, peer),
                    name=f"lossy-{n}-{direction}", daemon=True,
                ).start()  # fmt: skip

    def _pump(
        self,
        src: socket.socket,
        dst: socket.socket,
        direction: str,
        rng: random.Random,
        pair: tuple[socket.socket, socket.socket],
        peer: str = "127.0.0.1",
    ) -> None:
        chance = self.drop_requests if direction == "request" else self.drop_replies
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                with self._lock:
                    self.stats.chunks += 1
                    drop = self.lossy and rng.random() < chance
                    if drop and direction == "request":
                        self.stats.requests_dropped += 1
                    elif drop:
                        self.stats.replies_dropped += 1
                cut = self.mode_for(peer)
                if drop or cut == "reset":
                    break
                if cut == "blackhole":
                    continue  # swallowed: neither side hears anything
                dst.sendall(data)
        except OSError:
            pass  # the other side was reset or closed
        for sock in pair:
            reset(sock)
        with self._lock:
            self._open.difference_update(pair)
            for sock in pair:
                self._peers.pop(sock, None)
