"""A small HTTP/1.1 keep-alive load generator: asyncio Protocols over raw sockets.

Light on purpose (the server, Redis and this share 2 cores): no HTTP library, requests are
prebuilt bytes, a response is framed by its Content-Length only. Each of `concurrency`
connections sends one request, waits for the whole response, sends the next (no
pipelining). A server that answers `Connection: close` (gunicorn's sync worker) costs a
reconnect per request, which is part of what it is measured for.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field


def build_request(method: str, path: str, body: bytes = b"", host: str = "127.0.0.1") -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: {host}\r\n"
    if body or method == "POST":
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + body


@dataclass
class Tally:
    statuses: Counter[int] = field(default_factory=Counter)
    errors: int = 0
    reconnects: int = 0
    counting: bool = False

    @property
    def ok(self) -> int:
        return sum(n for status, n in self.statuses.items() if 200 <= status < 300)


class Conn(asyncio.Protocol):
    def __init__(self, requests: Iterator[bytes], tally: Tally, done: asyncio.Future[None]) -> None:
        self.requests = requests
        self.tally = tally
        self.done = done
        self.buf = b""
        self.need = -1
        self.close_after = False
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.write(next(self.requests))

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            if self.need < 0:
                end = self.buf.find(b"\r\n\r\n")
                if end < 0:
                    return
                head = self.buf[:end].lower()
                status = int(head[9:12])
                at = head.find(b"content-length:")
                length = 0
                if at >= 0:
                    eol = head.find(b"\r\n", at)
                    length = int(head[at + 15 : eol if eol >= 0 else len(head)])
                self.close_after = b"connection: close" in head
                self.need = end + 4 + length
                self.status = status
            if len(self.buf) < self.need:
                return
            self.buf = self.buf[self.need :]
            self.need = -1
            if self.tally.counting:
                self.tally.statuses[self.status] += 1
            assert self.transport is not None
            if self.close_after:
                self.transport.close()
                return
            self.transport.write(next(self.requests))

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)


async def _worker(host: str, port: int, requests: Iterator[bytes], tally: Tally, stop_at: float) -> None:
    loop = asyncio.get_running_loop()
    while loop.time() < stop_at:
        done: asyncio.Future[None] = loop.create_future()
        try:
            transport, _ = await loop.create_connection(lambda d=done: Conn(requests, tally, d), host, port)
        except OSError:
            tally.errors += 1
            await asyncio.sleep(0.01)
            continue
        try:
            await asyncio.wait_for(asyncio.shield(done), max(stop_at - loop.time(), 0.001))
            tally.reconnects += 1
        except TimeoutError:
            transport.close()
            return


async def _run(
    host: str,
    port: int,
    requests: list[bytes],
    concurrency: int,
    warmup: float,
    seconds: float,
    probe: Callable[[], float],
) -> tuple[Tally, float, float]:
    tally = Tally()
    cycle = itertools.cycle(requests)
    loop = asyncio.get_running_loop()
    stop_at = loop.time() + warmup + seconds + 0.05
    tasks = [asyncio.create_task(_worker(host, port, cycle, tally, stop_at)) for _ in range(concurrency)]
    await asyncio.sleep(warmup)
    tally.counting = True
    started, cpu_started = time.perf_counter(), probe()
    await asyncio.sleep(seconds)
    tally.counting = False
    elapsed, cpu = time.perf_counter() - started, probe() - cpu_started
    await asyncio.gather(*tasks)
    return tally, elapsed, cpu


def measure(
    host: str,
    port: int,
    requests: list[bytes],
    concurrency: int = 16,
    warmup: float = 1.0,
    seconds: float = 4.0,
    probe: Callable[[], float] = lambda: 0.0,
) -> tuple[float, float, Tally]:
    """(2xx answers per second, `probe()` seconds per 2xx answer, tally), over `seconds` after `warmup`.

    `probe` is read when counting starts and stops: e.g. the CPU seconds the server used.
    """
    tally, elapsed, cpu = asyncio.run(_run(host, port, requests, concurrency, warmup, seconds, probe))
    return tally.ok / elapsed, cpu / max(tally.ok, 1), tally
