"""A small HTTP/1.1 keep-alive load generator: asyncio Protocols over raw sockets.

Light on purpose (the server, Redis and this share 2 cores): no HTTP library, requests are
prebuilt bytes, a response is framed by its Content-Length only. Each of `concurrency`
connections sends one request, waits for the whole response, sends the next (no
pipelining). A server that answers `Connection: close` (gunicorn's sync worker) costs a
reconnect per request, which is part of what it is measured for.

Two modes, both recording each request's latency (one `loop.time()` per send and answer):
- closed loop (`measure`): every connection sends again as soon as it has its answer: the
  maximum rate;
- open loop (`measure(rate=R)`): requests are due at a fixed rate R, spread evenly; a due
  request goes out on an idle connection or waits in a backlog for the next one to free
  up, and its latency counts from when it was DUE, not when it was sent. A server that
  stalls therefore shows its queueing in the latency instead of slowing the generator
  down (no coordinated omission, as in wrk2).
`RespConn` speaks Redis's protocol the same way, for the Redis ceiling of the same work.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter, deque
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
    latencies: list[float] = field(default_factory=list)  # seconds, answers while counting

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
        self.loop = asyncio.get_running_loop()
        self.sent_at = self.loop.time()
        transport.write(next(self.requests))

    def answered(self, status: int) -> None:
        if self.tally.counting:
            self.tally.statuses[status] += 1
            self.tally.latencies.append(self.loop.time() - self.sent_at)

    def send_next(self) -> None:
        assert self.transport is not None
        self.sent_at = self.loop.time()
        self.transport.write(next(self.requests))

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
            self.answered(self.status)
            assert self.transport is not None
            if self.close_after:
                self.transport.close()
                return
            self.send_next()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)


def http_answer_end(buf: bytes) -> tuple[int, int] | None:
    """(end offset, status) of the first whole HTTP answer in `buf`, framed by Content-Length."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return None
    head = buf[:end].lower()
    at = head.find(b"content-length:")
    length = 0
    if at >= 0:
        eol = head.find(b"\r\n", at)
        length = int(head[at + 15 : eol if eol >= 0 else len(head)])
    need = end + 4 + length
    return (need, int(head[9:12])) if len(buf) >= need else None


def resp_end(buf: bytes, pos: int = 0) -> int:
    """Offset just past the first whole RESP reply at `pos` in `buf`, or -1 if incomplete."""
    eol = buf.find(b"\r\n", pos)
    if eol < 0:
        return -1
    kind, value = buf[pos : pos + 1], buf[pos + 1 : eol]
    if kind in (b"+", b"-", b":"):
        return eol + 2
    if kind == b"$":
        size = int(value)
        end = eol + 2 + size + 2 if size >= 0 else eol + 2
        return end if len(buf) >= end else -1
    if kind == b"*":
        at = eol + 2
        for _ in range(max(int(value), 0)):
            at = resp_end(buf, at)
            if at < 0:
                return -1
        return at
    raise ValueError(f"not a RESP reply: {buf[pos : pos + 20]!r}")


def resp_command(*parts: str | bytes) -> bytes:
    """One command in RESP (an array of bulk strings)."""
    out = [b"*%d\r\n" % len(parts)]
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


class RespConn(Conn):
    """A Redis connection: sends the next prebuilt command when a whole reply is in.

    Replies count as status 200, error replies (`-ERR ...`) as 500.
    """

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = resp_end(self.buf)
            if end < 0:
                return
            status = 500 if self.buf[:1] == b"-" else 200
            self.buf = self.buf[end:]
            self.answered(status)
            self.send_next()


async def _worker(
    host: str, port: int, requests: Iterator[bytes], tally: Tally, stop_at: float, kind: type[Conn]
) -> None:
    loop = asyncio.get_running_loop()
    while loop.time() < stop_at:
        done: asyncio.Future[None] = loop.create_future()
        try:
            transport, _ = await loop.create_connection(lambda d=done: kind(requests, tally, d), host, port)
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
    kind: type[Conn],
) -> tuple[Tally, float, float]:
    tally = Tally()
    cycle = itertools.cycle(requests)
    loop = asyncio.get_running_loop()
    stop_at = loop.time() + warmup + seconds + 0.05
    tasks = [
        asyncio.create_task(_worker(host, port, cycle, tally, stop_at, kind)) for _ in range(concurrency)
    ]
    await asyncio.sleep(warmup)
    tally.counting = True
    started, cpu_started = time.perf_counter(), probe()
    await asyncio.sleep(seconds)
    tally.counting = False
    elapsed, cpu = time.perf_counter() - started, probe() - cpu_started
    await asyncio.gather(*tasks)
    return tally, elapsed, cpu


class Pacer:
    """The open loop's schedule: request i is due at `start + i / rate`."""

    def __init__(self, requests: Iterator[bytes], rate: float, start: float, count_from: float) -> None:
        self.requests = requests
        self.rate = rate
        self.start = start
        self.count_from = count_from
        self.issued = 0
        self.backlog: deque[float] = deque()  # due times of requests no connection could take yet
        self.idle: deque[PacedMixin] = deque()

    def due_until(self, now: float) -> None:
        due = int((now - self.start) * self.rate) + 1
        while self.issued < due:
            self.backlog.append(self.start + self.issued / self.rate)
            self.issued += 1
        while self.backlog and self.idle:
            self.idle.popleft().send_due(self.backlog.popleft())

    def next_due(self) -> float:
        return self.start + self.issued / self.rate


class PacedMixin:
    """A connection of the open loop: sends when the Pacer hands it a due request."""

    pacer: Pacer
    requests: Iterator[bytes]
    tally: Tally
    transport: asyncio.Transport | None
    due: float

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.loop = asyncio.get_running_loop()
        self.pacer.idle.append(self)

    def send_due(self, due: float) -> None:
        assert self.transport is not None
        self.due = due
        self.transport.write(next(self.requests))

    def answered(self, status: int) -> None:
        if self.due >= self.pacer.count_from and self.tally.counting:
            self.tally.statuses[status] += 1
            self.tally.latencies.append(self.loop.time() - self.due)

    def send_next(self) -> None:
        if self.pacer.backlog:
            self.send_due(self.pacer.backlog.popleft())
        else:
            self.pacer.idle.append(self)


class PacedHttp(PacedMixin, Conn):
    pass


class PacedResp(PacedMixin, RespConn):
    pass


async def _paced_run(
    host: str,
    port: int,
    requests: list[bytes],
    concurrency: int,
    rate: float,
    warmup: float,
    seconds: float,
    probe: Callable[[], float],
    kind: type[PacedMixin],
) -> tuple[Tally, float, float]:
    tally = Tally(counting=True)
    loop = asyncio.get_running_loop()
    pacer = Pacer(itertools.cycle(requests), rate, loop.time(), loop.time() + warmup)
    done: asyncio.Future[None] = loop.create_future()

    def factory() -> asyncio.Protocol:
        conn = kind(pacer.requests, tally, done)  # type: ignore[call-arg]
        conn.pacer = pacer
        return conn  # type: ignore[return-value]

    transports = [(await loop.create_connection(factory, host, port))[0] for _ in range(concurrency)]
    pacer.start, pacer.count_from = loop.time(), loop.time() + warmup  # the schedule starts now
    end = pacer.count_from + seconds
    cpu_started = None
    while (now := loop.time()) < end:
        if cpu_started is None and now >= pacer.count_from:
            started, cpu_started = time.perf_counter(), probe()
        pacer.due_until(now)
        await asyncio.sleep(max(pacer.next_due() - loop.time(), 0))
    elapsed = time.perf_counter() - started if cpu_started is not None else seconds
    cpu = probe() - (cpu_started or 0.0)
    drain_until = loop.time() + 2.0  # answers to requests due in the window still count
    while len(pacer.idle) < concurrency and loop.time() < drain_until:
        await asyncio.sleep(0.005)
    tally.counting = False
    for transport in transports:
        transport.close()
    return tally, elapsed, cpu


def measure(
    host: str,
    port: int,
    requests: list[bytes],
    concurrency: int = 16,
    warmup: float = 1.0,
    seconds: float = 4.0,
    probe: Callable[[], float] = lambda: 0.0,
    rate: float | None = None,
    redis: bool = False,
) -> tuple[float, float, Tally]:
    """(2xx answers per second, `probe()` seconds per 2xx answer, tally), over `seconds` after `warmup`.

    `probe` is read when counting starts and stops: e.g. the CPU seconds the server used.
    `rate`: the open loop at that many requests per second (else the closed loop);
    `redis`: the requests are RESP commands to a Redis server, not HTTP requests.
    """
    if rate is None:
        kind: type[Conn] = RespConn if redis else Conn
        run = _run(host, port, requests, concurrency, warmup, seconds, probe, kind)
    else:
        paced: type[PacedMixin] = PacedResp if redis else PacedHttp
        run = _paced_run(host, port, requests, concurrency, rate, warmup, seconds, probe, paced)
    tally, elapsed, cpu = asyncio.run(run)
    return tally.ok / elapsed, cpu / max(tally.ok, 1), tally
