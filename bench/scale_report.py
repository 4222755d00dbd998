"""bench/scale.py's checks and tables: exactly-once, steer-to-model latency, memory."""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import os
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import redis
from common import descendants, median, memory_kib, percentile, proc_table, table


@dataclass
class Steer:
    session: str
    text: str
    offset: int
    sent_at: float  # epoch seconds the coordinator sent it
    answer_s: float = 0.0  # how long the POST took
    late_s: float = 0.0  # how far behind its 2 s schedule the coordinator sent it


def redis_used_memory(url: str) -> int:
    client = redis.Redis.from_url(url)
    try:
        return int(client.info("memory")["used_memory"])
    finally:
        client.close()


def epoch(ts: str) -> float:
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


@dataclass
class Report:
    redis_url: str
    model_url: str
    web_port: int
    ids: list[str]
    steers: list[Steer]
    errors: list[str]
    lines: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    target_ms: float = 50.0
    window: tuple[float, float] = (0.0, float("inf"))  # epoch seconds: the steering window

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.redis_url, decode_responses=True)

    # --- memory, while every session runs ------------------------------------------------

    def memory(self, pool_pids: list[int], baseline: int) -> None:
        parent = proc_table()[0]
        workers = [pid for pid in descendants(pool_pids, parent) if parent.get(pid) in pool_pids]
        horses = [pid for pid in descendants(workers, parent) if parent.get(pid) in workers]
        rows = []
        horse = "work horse (+ RQ scheduler)"  # one worker also forks RQ's scheduler process
        groups = (("pool parent", pool_pids), ("worker process", workers), (horse, horses))
        for name, pids in groups:
            mem = [memory_kib(pid) for pid in pids]
            rss = [r / 1024 for r, _ in mem]
            pss = [p / 1024 for _, p in mem]
            rows.append([name, len(pids), f"{median(rss):.0f}", f"{median(pss):.0f}", f"{sum(pss):.0f}"])
        self.lines.append(
            table(["process", "count", "RSS MiB (median)", "PSS MiB (median)", "PSS MiB (sum)"], rows)
        )
        self.lines.append(self._redis_memory(baseline))

    def tier_memory(self, idle_kib: int, running_kib: int) -> None:
        """The whole worker tier's PSS before any session and with every session running."""
        per = (running_kib - idle_kib) / max(len(self.ids), 1) / 1024
        self.lines.append(
            f"\nWorker tier PSS: {idle_kib / 1024:.0f} MiB idle, {running_kib / 1024:.0f} MiB with "
            f"{len(self.ids)} sessions running: **{per:.2f} MiB per session** over the idle size."
        )

    def cpu_per_call(self, cpu: dict[str, float], calls: int, window: float, latency: float) -> None:
        """Daemon CPU (workers, web, Redis: not the fake model, which stands for the API) per
        model call in the steering window, and the sessions this host could hold: its cores
        make at most cores / (CPU per call) calls a second, and a session makes one call per
        `latency` seconds (plus its turn's own time, left out: the projection is an upper
        bound)."""
        daemon = sum(seconds for name, seconds in cpu.items() if name != "fakemodel")
        workers = sum(seconds for name, seconds in cpu.items() if name.startswith("workers"))
        if not calls:
            return
        per_call = daemon / calls
        cores = os.cpu_count() or 1
        rate = cores / per_call
        self.lines.append(
            f"\nModel calls in the window: {calls} ({calls / window:.1f}/s; "
            f"{calls / window / max(len(self.ids), 1) * latency:.2f} of one per {latency:g} s per "
            f"session). Daemon CPU per model call: {per_call * 1000:.2f} ms (workers "
            f"{workers / calls * 1000:.2f} ms). Saturation: {cores} cores / {per_call * 1000:.2f} ms = "
            f"{rate:.0f} calls/s; at {latency:g} s a call, {rate:.0f} x {latency:g} = "
            f"**{rate * latency:.0f} sessions** at most."
        )

    def _redis_memory(self, baseline: int) -> str:
        client = self.client()
        used = int(client.info("memory")["used_memory"])
        per_key: dict[str, list[int]] = defaultdict(list)
        journal_per_k, events_per_k, entries = [], [], []
        for sid in self.ids:
            base = f"wt:session:{{{sid}}}"
            for suffix in ("", ":steer", ":inflight", ":steers", ":dedup", ":events", ":history", ":lease"):
                per_key[suffix or ":record"].append(int(client.memory_usage(base + suffix, samples=0) or 0))
            length = client.xlen(f"{base}:steers")
            entries.append(length)
            journal_per_k.append(per_key[":steers"][-1] / max(length, 1) * 1000)
            events_per_k.append(per_key[":events"][-1] / max(client.xlen(f"{base}:events"), 1) * 1000)
        client.close()
        session_total = [sum(values[i] for values in per_key.values()) for i in range(len(self.ids))]
        lines = [
            f"\nRedis used_memory: {(used - baseline) / len(self.ids) / 1024:.0f} KiB per session "
            f"({(used - baseline) / 2**20:.1f} MiB over the baseline for {len(self.ids)} sessions, "
            "RQ job keys and the global streams included).",
            f"Session keys (MEMORY USAGE, median per session): {median(session_total) / 1024:.0f} KiB = "
            + ", ".join(f"{k.lstrip(':')} {median(v) / 1024:.1f}" for k, v in per_key.items() if median(v)),
            f"Steer journal: {median(journal_per_k) / 1024:.0f} KiB per 1,000 entries "
            f"(median {median(entries):.0f} entries a session); event stream: "
            f"{median(events_per_k) / 1024:.0f} KiB per 1,000 events.",
        ]
        return "\n".join(lines)

    # --- the end -------------------------------------------------------------------------

    def cancel_all(self, wait: Callable[[], object]) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.web_port, timeout=30)
        for sid in self.ids:
            conn.request(
                "POST", f"/api/v2/sessions/{sid}/cancel", headers={"Content-Type": "application/json"}
            )
            conn.getresponse().read()
        conn.close()
        wait()

    def all_finished(self) -> bool:
        client = self.client()
        try:
            statuses = [client.hget(f"wt:session:{{{sid}}}", "status") for sid in self.ids]
        finally:
            client.close()
        return all(status in ("completed", "failed", "cancelled") for status in statuses)

    # --- exactly once and latency --------------------------------------------------------

    def check(self, requests: list[dict[str, Any]]) -> None:
        by_session: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for request in requests:
            by_session[request["session"]].append(request)
        client = self.client()
        seen: Counter[str] = Counter()
        arrival: dict[str, tuple[float, int]] = {}
        for sid in self.ids:
            for request in sorted(by_session[sid], key=lambda r: r["t"]):
                for block in request["texts"]:
                    for part in block.split("\n\n"):
                        if part.startswith("Steer "):
                            seen[part] += 1
                            arrival.setdefault(part, (request["t"], request["turn"]))
        self._check_model_side(seen, arrival, by_session)
        turn_ends = {sid: self._turn_ends(client, sid) for sid in self.ids}
        self._check_journals(client)
        client.close()
        self._latency(arrival, turn_ends)
        self._stages(by_session, turn_ends)

    def _check_model_side(
        self, seen: Counter[str], arrival: dict[str, tuple[float, int]], by_session: dict[str, Any]
    ) -> None:
        texts = {s.text for s in self.steers}
        missing = [t for t in texts if seen[t] == 0]
        twice = [t for t in texts if seen[t] > 1]
        unknown = [t for t in seen if t not in texts]
        order_bad = 0
        for sid in self.ids:
            mine = sorted((s for s in self.steers if s.session == sid), key=lambda s: s.offset)
            times = [arrival[s.text] for s in mine if s.text in arrival]
            order_bad += sum(1 for a, b in itertools.pairwise(times) if b < a)
        self.lines.append(
            f"\nExactly once, model side: {len(texts)} steers accepted; in the model requests "
            f"{len(texts) - len(missing)} delivered, {len(missing)} missing, {len(twice)} more than once, "
            f"{len(unknown)} unknown, {order_bad} out of offset order "
            f"({sum(len(v) for v in by_session.values())} model requests)."
        )
        if missing or twice or unknown or order_bad:
            self.failures.append("model-side exactly-once check failed")

    def _check_journals(self, client: redis.Redis) -> None:
        accepted_want = Counter(s.session for s in self.steers)
        bad = undelivered = 0
        for sid in self.ids:
            accepted, delivered = [], []
            for _, fields in client.xrange(f"wt:session:{{{sid}}}:steers"):
                if fields["type"] == "accepted":
                    accepted.append(int(fields["offset"]))
                elif fields["type"] == "delivered":
                    delivered.extend(json.loads(fields["offsets"]))
                elif fields["type"] == "undelivered":
                    undelivered += len(json.loads(fields["offsets"]))
            if sorted(delivered) != sorted(accepted) or len(accepted) != accepted_want[sid]:
                bad += 1
        self.lines.append(
            f"Exactly once, journal side: {len(self.ids) - bad} of {len(self.ids)} sessions have exactly one "
            f"`delivered` per accepted offset; {undelivered} undelivered."
        )
        if bad or undelivered:
            self.failures.append("journal exactly-once check failed")

    @staticmethod
    def _turn_ends(client: redis.Redis, sid: str) -> dict[tuple[str, int], float]:
        """(kind, turnId) -> ts of the session's turn_ended, turn_started and llm_turn_completed events."""
        times = {}
        for _, fields in client.xrange(f"wt:session:{{{sid}}}:events"):
            event = json.loads(fields["data"])
            if event["kind"] in ("turn_ended", "turn_started", "llm_turn_completed"):
                times[(event["kind"], event["turnId"])] = epoch(event["ts"])
        return times

    def _latency(
        self, arrival: dict[str, tuple[float, int]], turn_ends: dict[str, dict[tuple[str, int], float]]
    ) -> None:
        after_turn_end, in_daemon, end_to_end = [], [], []
        for steer in self.steers:
            if steer.text not in arrival:
                continue
            at, turn = arrival[steer.text]
            times = turn_ends[steer.session]
            ended = times.get(("turn_ended", turn - 1))
            if ended is not None:
                after_turn_end.append((at - ended) * 1000)
                if ("turn_started", turn) in times:
                    in_daemon.append((times[("turn_started", turn)] - ended) * 1000)
            end_to_end.append((at - steer.sent_at) * 1000)

        def row(label: str, values: list[float], digits: int) -> list[object]:
            cells = [f"{percentile(values, p):.{digits}f}" for p in (50, 90, 99)]
            return [label, len(values), *cells, f"{max(values, default=0):.{digits}f}"]

        rows = [
            row("turn end → model request arrives (the target)", after_turn_end, 1),
            row("  of which turn end → next turn_started (daemon)", in_daemon, 1),
            row("steer sent → model request arrives", end_to_end, 0),
            row("steer POST answered (coordinator side)", [s.answer_s * 1000 for s in self.steers], 1),
            row("coordinator behind its schedule", [s.late_s * 1000 for s in self.steers], 1),
        ]
        self.lines.append("\n" + table(["steer latency (ms)", "steers", "p50", "p90", "p99", "max"], rows))
        if percentile(after_turn_end, 99) > self.target_ms:
            self.failures.append(f"steer-to-model p99 above {self.target_ms:g} ms")

    def _stages(
        self, by_session: dict[str, list[dict[str, Any]]], turn_ends: dict[str, dict[tuple[str, int], float]]
    ) -> None:
        """Every turn's turnaround (its reply's last byte written by the fake model → the
        session's next request arrives there), cut at the session's own events: where the
        time between two model calls goes, per stage (issue 32)."""
        stages: dict[str, list[float]] = defaultdict(list)
        names = (
            "reply written → llm_turn_completed (reply read)",
            "llm_turn_completed → turn_ended (tools, turn end)",
            "turn_ended → next turn_started (checkpoint, start)",
            "turn_started → request arrives (build, send)",
        )
        for sid, requests in by_session.items():
            times = turn_ends.get(sid, {})
            ordered = sorted(requests, key=lambda r: r["t"])
            for request, following in itertools.pairwise(ordered):
                turn = request["turn"]
                in_window = self.window[0] <= following["t"] <= self.window[1]
                if "done" not in request or following["turn"] != turn + 1 or not in_window:
                    continue
                marks = [
                    request["done"],
                    times.get(("llm_turn_completed", turn)),
                    times.get(("turn_ended", turn)),
                    times.get(("turn_started", turn + 1)),
                    following["t"],
                ]
                stages["turnaround: reply written → next request arrives"].append(
                    (following["t"] - request["done"]) * 1000
                )
                if None in marks:
                    continue
                for name, (a, b) in zip(names, itertools.pairwise(marks), strict=True):
                    stages[name].append((b - a) * 1000)  # type: ignore[operator]
        if not stages:
            return
        rows = [
            [name, len(values), *(f"{percentile(values, p):.1f}" for p in (50, 90, 99)), f"{max(values):.1f}"]
            for name, values in stages.items()
        ]
        header = ["turnaround by stage (ms)", "turns", "p50", "p90", "p99", "max"]
        self.lines.append("\n" + table(header, rows))

    def print(self, cpu: dict[str, float], window: float, args: argparse.Namespace) -> None:
        nice = f" (nice {args.model_nice})" if getattr(args, "model_nice", 0) else ""
        print(
            f"\n{args.sessions} sessions, fake model {args.latency:g} s per call{nice}, "
            f"a steer to each every {args.interval:g} s for {args.seconds:g} s ({window:.0f} s measured), "
            f"{len(self.steers)} steers, {len(self.errors)} steer errors\n"
        )
        for line in self.lines:
            print(line)
        used = ", ".join(f"{name} {seconds / window:.2f}" for name, seconds in cpu.items())
        print(f"\nCPU during the steering window (cores): {used}; machine {os.cpu_count()} cores")
        for error in self.errors[:5]:
            print(f"  steer error: {error}")
        print("\nresult: " + ("all checks passed" if not self.failures else "; ".join(self.failures)))
