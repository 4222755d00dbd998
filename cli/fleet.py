"""`worktrain workers` and `worktrain top`: the fleet from the command line (docs/operations.md,
README's worktrain command).

Both are thin clients of `GET /api/v2/workers`, `GET /api/v2/fleet` and
`GET /api/v2/sessions` (the numbers behind `GET /metrics`). `top` redraws a rich view every
`--interval` seconds — sessions by status, the busiest live sessions (pending steers, turn,
step), model calls in flight against the cap, steers a minute, the delivery latency — like
`rq info --interval` meets `htop`; `q` (or Ctrl-C) quits with exit code 0.
"""

from __future__ import annotations

import contextlib
import os
import select
import sys
import termios
import tty
from collections.abc import Iterator
from typing import Any

import click

from cli.common import Call, client_command
from cli.output import cell, print_json, print_table, say, short_time

LIVE = ("running", "waiting", "queued")
STATUSES = ("queued", "running", "waiting", "completed", "failed", "cancelled")
BUSIEST = 10


def _data(body: dict[str, Any]) -> dict[str, Any]:
    data = body.get("data", body)
    return data if isinstance(data, dict) else {}


@client_command("workers", short_help="The live worker processes and what each runs.")
def workers(call: Call) -> None:
    """Every live worker process: host, pid, concurrency, sessions, sandbox layers, heartbeat."""
    reply = call.client.get("/api/v2/workers")
    if call.as_json:
        print_json(reply)
        return
    rows = [
        (
            w.get("host"),
            w.get("pid"),
            f"{len(w.get('sessions') or [])}/{w.get('concurrency')}",
            w.get("modelCallsInFlight"),
            ", ".join(f"{k}={v}" for k, v in (w.get("sandbox") or {}).items()),
            short_time(w.get("startedAt")),
            short_time(w.get("heartbeatAt")),
            " ".join(w.get("sessions") or []),
        )
        for w in _data(reply).get("workers", [])
    ]
    columns = ("host", "pid", "sessions", "model calls", "sandbox", "started", "heartbeat", "running")
    print_table(columns, rows, title=f"{len(rows)} worker(s)", empty="no live workers")


def seconds(value: Any) -> str:
    if not isinstance(value, int | float):
        return "-"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.1f} s"


def busiest(sessions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Live sessions, the ones with the most steers waiting first, then the longest runs."""
    live = [s for s in sessions if s.get("status") in LIVE]
    return sorted(live, key=lambda s: (-(s.get("pendingSteers") or 0), -(s.get("turnCount") or 0)))[:BUSIEST]


def cost_text(cost: Any) -> str:
    """`$0.0123`: what the session's model calls cost so far; `-` for a model without a price."""
    return f"${cost:.4f}" if isinstance(cost, int | float) else "-"


def step_text(record: dict[str, Any]) -> str:
    """`2/4`: the step being worked on, counted from 1 (as the console shows it)."""
    count = int(record.get("stepCount") or 0)
    return f"{min(int(record.get('stepIndex') or 0) + 1, count)}/{count}" if count else "-"


NARROW = 110  # below this many columns a session is shown by the tail of its id


def session_cell(session_id: str, width: int) -> str:
    """The full id when there is room; else its last 12 characters (random, so unique in a
    screen of sessions), so that status, turn and step keep their columns (issue 33)."""
    return session_id if width >= NARROW or len(session_id) <= 13 else "…" + session_id[-12:]


def fleet_view(
    fleet: dict[str, Any], sessions: list[dict[str, Any]], *, live: bool = True, width: int = 200
) -> Any:
    """The rich renderable of one refresh (`live`: `top` runs until q, so it says how to quit)."""
    from rich import box
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    calls = fleet.get("modelCalls", {})
    cap = calls.get("cap") or 0
    delivery = fleet.get("delivery", {})
    head = Text.assemble(
        ("WorkTrain fleet  ", "bold"),
        f"workers {fleet.get('workers', 0)}   queue {fleet.get('queueDepth', 0)}   ",
        f"model calls {calls.get('inFlight', 0)}{f'/{cap}' if cap else ''} in flight   ",
        f"steers/min {fleet.get('steersPerMinute', 0)}   ",
        f"delivery p50 {seconds(delivery.get('p50'))} p99 {seconds(delivery.get('p99'))}",
    )
    statuses = Table(box=box.SIMPLE_HEAD, title="sessions by status", title_justify="left")
    counts = fleet.get("sessions", {})
    for status in counts:
        statuses.add_column(status, justify="right")
    statuses.add_row(*(str(counts[s]) for s in counts))
    table = Table(box=box.SIMPLE_HEAD, title="busiest live sessions", title_justify="left")
    narrow = width < NARROW
    table.add_column("session", no_wrap=True)
    table.add_column("workflow", no_wrap=True, overflow="ellipsis", max_width=12 if narrow else None)
    for column in ("status", "turn", "step"):
        table.add_column(column, no_wrap=True)
    table.add_column("steers" if narrow else "pending steers", no_wrap=True, justify="right")
    if not narrow:
        table.add_column("cost", no_wrap=True, justify="right")
        table.add_column("goal", overflow="ellipsis", no_wrap=True)
    for s in busiest(sessions):
        status = s.get("status", "") + (f" ({s['waitingFor']})" if s.get("waitingFor") else "")
        row = [
            session_cell(s.get("sessionId", ""), width),
            cell(s.get("workflowId")),
            status,
            cell(s.get("turnId") or s.get("turnCount")),
            step_text(s),
            cell(s.get("pendingSteers")),
        ]
        table.add_row(
            *row, *([] if narrow else [cost_text(s.get("costUsd")), cell((s.get("goalPreview") or "")[:40])])
        )
    if not table.row_count:
        table.add_row("(none)", *[""] * (len(table.columns) - 1))
    parts: list[Any] = [head, statuses, table]
    if live:
        parts.append(Text("q quits", style="dim"))
    return Group(*parts)


@contextlib.contextmanager
def keys_pressed() -> Iterator[Any]:
    """stdin in cbreak mode (one key at a time, no echo) while the view runs, when it is a tty."""
    if not sys.stdin.isatty():
        yield None
        return
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd)
    try:
        yield fd
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def quit_pressed(fd: int | None, timeout: float) -> bool:
    """Wait up to `timeout` for a key; True for `q`."""
    if fd is None:
        select.select([], [], [], timeout)
        return False
    ready, _, _ = select.select([fd], [], [], timeout)
    return bool(ready) and os.read(fd, 1).lower() == b"q"


def read_fleet(call: Call) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    fleet = _data(call.client.get("/api/v2/fleet"))
    sessions: list[dict[str, Any]] = []
    for status in LIVE:
        sessions += _data(call.client.get("/api/v2/sessions", status=status, limit=100)).get("sessions", [])
    return fleet, sessions


SPARKS = " ▁▂▃▄▅▆▇█"
# [label, the sample's value]: what `top --history` draws, a line each
HISTORY_SERIES: list[tuple[str, Any]] = [
    ("workers", lambda s: s.get("workers")),
    ("queue", lambda s: s.get("queueDepth")),
    ("model calls", lambda s: s.get("inFlight")),
    ("steers/min", lambda s: s.get("steersPerMinute")),
    ("delivery p50", lambda s: s.get("p50")),
    ("delivery p99", lambda s: s.get("p99")),
    *((status, (lambda st: lambda s: (s.get("sessions") or {}).get(st))(status)) for status in STATUSES),
]


def sparkline(values: list[float | None], width: int) -> str:
    """`values` (oldest first) in `width` columns, the highest of each column's values as a block
    from ▁ to █ scaled to the highest overall (a blank: no sample in that column)."""
    if not values or width <= 0:
        return ""
    top = max((v for v in values if v is not None), default=0) or 1
    width, n = min(width, len(values)), len(values)  # fewer samples than columns: one a column
    columns: list[float | None] = []
    for i in range(width):
        chunk = [v for v in values[i * n // width : (i + 1) * n // width] if v is not None]
        columns.append(max(chunk) if chunk else None)
    return "".join(" " if v is None else SPARKS[max(1, round(v / top * (len(SPARKS) - 1)))] for v in columns)


def number(value: Any) -> str:
    if isinstance(value, float):
        return seconds(value)
    return "-" if value is None else str(value)


def history_lines(samples: list[dict[str, Any]], width: int) -> list[str]:
    """`top --history`: the fleet's samples (one a minute, oldest first) as a sparkline a series,
    with its highest and its last value, under a line naming the time span."""
    if not samples:
        return ["no fleet history yet: a worker takes one sample a minute (worktrain worker)"]
    label, stats = 13, 24
    spark = max(10, width - label - stats - 2)
    first, last = samples[0]["t"], samples[-1]["t"]
    lines = [f"{len(samples)} sample(s), one a minute, {clock(first)} -> {clock(last)}"]
    for name, pick in HISTORY_SERIES:
        values = [pick(s) for s in samples]
        present = [v for v in values if v is not None]
        high = number(max(present)) if present else "-"
        line = f"{name:<{label}} {sparkline(values, spark)}  max {high:<7} now {number(values[-1])}"
        lines.append(line.rstrip())
    return lines


def clock(epoch_seconds: int) -> str:
    from datetime import datetime

    return datetime.fromtimestamp(epoch_seconds).strftime("%Y-%m-%d %H:%M")


def show_history(call: Call, hours: float, width: int) -> None:
    import time

    since = max(0, int(time.time() - hours * 3600))
    data = _data(call.client.get("/api/v2/fleet/history", since=since))
    if call.as_json:
        print_json(data)
        return
    for line in history_lines(list(data.get("samples", [])), width):
        say(line)


@client_command("top", short_help="A live view of the fleet (q quits).")
@click.option(
    "--interval", "-n", type=float, default=2.0, show_default=True, help="Seconds between refreshes."
)
@click.option("--once", is_flag=True, help="Print one view and exit (for scripts and logs).")
@click.option(
    "--history",
    "history",
    is_flag=True,
    help="Print the fleet's history (one sample a minute, kept 24 h) as a line a series, and exit.",
)
@click.option(
    "--hours",
    type=click.FloatRange(min=0.02, max=24),
    default=6.0,
    show_default=True,
    help="With --history: how far back.",
)
def top(call: Call, interval: float, once: bool, history: bool, hours: float) -> None:
    """Sessions by status, the busiest live sessions, model calls in flight, steers a minute;
    with --history, the same over the last hours."""
    from rich.console import Console
    from rich.live import Live

    if history:
        show_history(call, hours, Console().width)
        return
    if call.as_json:
        fleet, sessions = read_fleet(call)
        print_json({"fleet": fleet, "sessions": busiest(sessions)})
        return
    console = Console(highlight=False)
    if once:
        console.print(fleet_view(*read_fleet(call), live=False, width=console.width))
        return
    with keys_pressed() as fd, Live(console=console, auto_refresh=False, transient=False) as live:
        while True:
            live.update(fleet_view(*read_fleet(call), width=console.width), refresh=True)
            if quit_pressed(fd, max(0.2, interval)):
                return
