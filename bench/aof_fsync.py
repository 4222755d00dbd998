"""What `appendfsync always` costs the steer path, against the default `everysec`.

    .venv/bin/python bench/aof_fsync.py [--runs 3] [--seconds 3] [--concurrency 16]

For each policy it starts a redis-server (AOF on, that policy, data in a temporary folder
on this machine's disk) and `worktrain web` (its default server shape) against it, then
measures, alternating the policies `--runs` times, with bench/loadgen.py:
- `steer`: POST /api/v2/sessions/<id>/steer over HTTP, rotating over 64 fresh sessions;
- `accept`: EVALSHA of accept.lua straight to Redis (what one steer runs), no HTTP.
It prints the median accepted steers per second of each and the ratio always/everysec.
With `always`, Redis writes and fsyncs the AOF before it answers, once per event-loop
pass: concurrent clients share an fsync (group commit), so the cost depends on the disk's
fsync latency and on how many steers arrive together.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from loadgen import build_request, measure, resp_command  # noqa: E402

from daemon.bus.keys import Keys  # noqa: E402
from daemon.bus.scripts import script_source  # noqa: E402
from daemon.bus.session.registry import NewSession, SessionRegistry  # noqa: E402
from daemon.host.embedded_redis import RedisServer, free_port  # noqa: E402

POLICIES = ("everysec", "always")
SESSIONS = 64
TEXT = "Focus on the failing test first; leave the refactor for later."


def fresh_sessions(url: str) -> list[str]:
    import redis

    client = redis.Redis.from_url(url, decode_responses=True)
    registry = SessionRegistry(client, Keys("wt"))
    ids = [
        registry.create(NewSession(workflowId="bench", goal="bench", workspacePath="/tmp"))
        for _ in range(SESSIONS)
    ]
    client.close()
    return ids


def steer_requests(url: str) -> list[bytes]:
    body = json.dumps({"text": TEXT}).encode()
    return [build_request("POST", f"/api/v2/sessions/{sid}/steer", body) for sid in fresh_sessions(url)]


def accept_commands(url: str) -> list[bytes]:
    import redis

    client = redis.Redis.from_url(url)
    sha = client.script_load(script_source("accept"))
    client.close()
    keys = Keys("wt")
    args = [TEXT, "digest", "", "", "2026-01-01T00:00:00.000Z"]
    return [resp_command("EVALSHA", sha, "8", *keys.session(sid).all(), *args) for sid in fresh_sessions(url)]


class Tier:
    """One policy's redis-server and `worktrain web`."""

    def __init__(self, policy: str, tmp: Path) -> None:
        self.policy = policy
        self.redis = RedisServer(tmp / policy / "redis", appendfsync=policy)
        self.web_port = free_port()
        self.web: subprocess.Popen[bytes] | None = None
        self.log_path = tmp / policy / "web.log"

    def start(self) -> None:
        self.redis.start()
        env = {**os.environ, "REDIS_URL": self.redis.url, "WORKTRAIN_DATA_DIR": str(self.log_path.parent)}
        env.pop("WORKTRAIN_API_TOKEN", None)
        with open(self.log_path, "wb") as log:
            self.web = subprocess.Popen(
                [sys.executable, "-m", "cli", "web", "--bind", "127.0.0.1", "--port", str(self.web_port)],
                env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.web_port}/readyz", timeout=2):
                    return
            except OSError:
                if time.monotonic() > deadline or self.web.poll() is not None:
                    raise RuntimeError(f"worktrain web did not start:\n{self.log_path.read_text()}") from None
                time.sleep(0.1)

    def stop(self) -> None:
        if self.web is not None and self.web.poll() is None:
            os.killpg(self.web.pid, signal.SIGTERM)
            self.web.wait(15)
        self.redis.stop()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--warmup", type=float, default=0.5)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="worktrain-aof-"))
    tiers = {policy: Tier(policy, tmp) for policy in POLICIES}
    rates: dict[tuple[str, str], list[float]] = {}
    try:
        for tier in tiers.values():
            tier.start()
        for run in range(1, args.runs + 1):
            for policy, tier in tiers.items():
                for what, port, requests, resp in (
                    ("steer", tier.web_port, steer_requests(tier.redis.url), False),
                    ("accept", tier.redis.port, accept_commands(tier.redis.url), True),
                ):
                    rps, _, tally = measure(
                        "127.0.0.1", port, requests, args.concurrency, args.warmup, args.seconds, redis=resp
                    )
                    rates.setdefault((what, policy), []).append(rps)
                    bad = {s: n for s, n in tally.statuses.items() if not 200 <= s < 300}
                    print(f"run {run} {what:<6} {policy:<8} {rps:8.0f}/s {bad or ''}", file=sys.stderr)
    finally:
        for tier in tiers.values():
            tier.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"median of {args.runs} runs x {args.seconds:.0f} s, {args.concurrency} connections:")
    for what in ("steer", "accept"):
        every, always = (statistics.median(rates[(what, p)]) for p in POLICIES)
        print(
            f"  {what:<6} everysec {every:7.0f}/s  always {always:7.0f}/s  "
            f"always/everysec {always / every:.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
