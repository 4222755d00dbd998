"""Growth: accept and drain cost with 1, 100 and 10,000 pending steers, and with long journals.

    .venv/bin/python bench/growth.py [--max-pending 10000] [--journal 100000] [--samples 200]

One command: starts its own redis-server (AOF everysec) and calls the bus directly.

- accept: the latency of one `SteerBus.accept` (client wall time, median and p99 of
  `--samples` calls, each call measured alone) into a session that already has P pending
  steers (P = 1, 100, 10,000) and a journal of the same length, then into one whose journal
  has `--journal` entries (accepted and delivered long ago, nothing pending). Target: flat.
- drain: the turn end that takes k pending steers (`turn_ended`: one Lua step moves them in
  flight and returns them, parsed), and the checkpoint that retires them, for k = 0, 1, 10,
  100, 1,000, 10,000 (median of several fresh set-ups each). Target: linear in k, i.e.
  flat per steer once k dominates.
Redis's own microseconds per call (INFO commandstats, EVALSHA) are shown beside the client's.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, machine_line, median, new_bench_session, percentile, table

sys.path.insert(0, str(ROOT))
import redis

from daemon.bus.keys import Keys
from daemon.bus.scripts import ACCEPT
from daemon.bus.session.steerbus import SessionChannel, SteerBus
from daemon.host.clock import utc_now_iso
from daemon.host.embedded_redis import RedisServer
from daemon.host.redisconn import connect

TEXT = "Focus on the failing test first; leave the refactor for later."


def fill(bus: SteerBus, session_id: str, count: int, same_text: bool = False) -> None:
    """`count` real accepts, pipelined 1,000 at a time (set-up only, not measured).

    Each steer has its own text and time, as a coordinator's do. `same_text`: one text and
    one time for all, so the pending JSONs differ only in their offset: the worst case for
    Redis's Lua 5.1, whose string hash samples every few characters of a long string, so
    such strings collide when a script reads them (see docs/benchmarks.md, "Growth").
    """
    keys = bus.keys.session(session_id)
    for start in range(0, count, 1000):
        pipe = bus.client.pipeline(transaction=False)
        for i in range(start, min(start + 1000, count)):
            text = TEXT if same_text else f"{TEXT} ({i})"
            now = "2026-01-01T00:00:00.000Z" if same_text else utc_now_iso()
            bus.scripts.queue(pipe, ACCEPT, keys, [text, "digest", "", "", now])
        pipe.execute()


def evalsha_us(client: redis.Redis) -> tuple[int, float]:
    stats = client.info("commandstats").get("cmdstat_evalsha", {"calls": 0, "usec": 0})
    return int(stats["calls"]), float(stats["usec"])


def server_us_per_call(client: redis.Redis, before: tuple[int, float]) -> float:
    calls, usec = evalsha_us(client)
    return (usec - before[1]) / max(calls - before[0], 1)


def accept_row(bus: SteerBus, label: str, session_id: str, samples: int) -> list[object]:
    times = []
    before = evalsha_us(bus.client)
    for _ in range(samples):
        started = time.perf_counter()
        bus.accept(session_id, TEXT)
        times.append((time.perf_counter() - started) * 1e6)
    server = server_us_per_call(bus.client, before)
    return [label, f"{median(times):.0f}", f"{percentile(times, 99):.0f}", f"{server:.1f}"]


def accept_rows(bus: SteerBus, max_pending: int, journal: int, samples: int) -> list[list[object]]:
    rows = []
    for pending in sorted({1, 100, max_pending}):
        sid = new_bench_session(bus.client)
        fill(bus, sid, pending)
        rows.append(accept_row(bus, f"{pending:,} pending (journal {pending:,})", sid, samples))
    sid = new_bench_session(bus.client)
    channel = bus.channel(sid, "bench-worker", 60)
    channel.claim()
    for start in range(0, journal, 10_000):  # long ago: accepted and delivered, nothing pending
        fill(bus, sid, min(10_000, journal - start))
        channel.checkpoint(0, ["{}"], [s.offset for s in channel.turn_ended()], 1)
    length = bus.client.xlen(bus.keys.session(sid).journal)
    rows.append(accept_row(bus, f"0 pending, journal {length:,} entries", sid, samples))
    return rows


def drain_once(bus: SteerBus, k: int, same_text: bool = False) -> tuple[float, float, float, float]:
    """(turn_ended µs, its server µs, checkpoint µs, its server µs) for a fresh session with k pending."""
    sid = new_bench_session(bus.client)
    channel: SessionChannel = bus.channel(sid, "bench-worker", 60)
    channel.claim()
    channel.start_turn()
    fill(bus, sid, k, same_text)
    before = evalsha_us(bus.client)
    started = time.perf_counter()
    steers = channel.turn_ended()
    drained = time.perf_counter()
    drain_server = server_us_per_call(bus.client, before)
    assert len(steers) == k, (len(steers), k)
    before = evalsha_us(bus.client)
    checkpoint_started = time.perf_counter()
    channel.checkpoint(0, ["{}"], [s.offset for s in steers], 2)
    done = time.perf_counter()
    checkpoint_server = server_us_per_call(bus.client, before)
    return (drained - started) * 1e6, drain_server, (done - checkpoint_started) * 1e6, checkpoint_server


def drain_rows(bus: SteerBus, max_pending: int) -> list[list[object]]:
    rows = []
    sizes = [(k, False) for k in (0, 1, 10, 100, 1000, 10_000) if k <= max_pending]
    sizes += [(k, True) for k in (1000, 10_000) if k <= max_pending]
    for k, same_text in sizes:
        repeats = 3 if k >= 10_000 else 7
        runs = [drain_once(bus, k, same_text) for _ in range(repeats)]
        drain, drain_server, ckpt, ckpt_server = (median([r[i] for r in runs]) for i in range(4))
        per = f"{drain / k:.1f}" if k else "-"
        per_ckpt = f"{ckpt / k:.1f}" if k else "-"
        rows.append(
            [
                f"{k:,}" + (" (one text, one time)" if same_text else ""),
                f"{drain:.0f}",
                f"{drain_server:.0f}",
                per,
                f"{ckpt:.0f}",
                f"{ckpt_server:.0f}",
                per_ckpt,
            ]
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--max-pending", type=int, default=10_000)
    parser.add_argument("--journal", type=int, default=100_000)
    parser.add_argument("--samples", type=int, default=200)
    args = parser.parse_args(argv)
    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="wt-growth-"))
    server = RedisServer(tmp / "redis")
    server.start()
    try:
        bus = SteerBus(connect(server.url, socket_timeout=60), Keys("wt"))
        bus.accept(new_bench_session(bus.client), TEXT)  # load the script
        accepts = accept_rows(bus, args.max_pending, args.journal, args.samples)
        drains = drain_rows(bus, args.max_pending)
        bus.client.close()
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n{machine_line()}\n")
    print(f"Accept, {args.samples} calls each (µs):\n")
    print(table(["session", "accept p50", "accept p99", "Redis µs/call"], accepts))
    print("\nDrain k pending steers at a turn end, and the checkpoint that retires them (µs, median):\n")
    header = ["k", "turn_ended", "Redis", "per steer", "checkpoint", "Redis", "per steer"]
    print(table(header, drains))
    print("\ntargets: accept flat in pending and journal length; drain linear in k")
    print(f"took {time.monotonic() - started:.0f}s")


if __name__ == "__main__":
    main()
