"""`worktrain up` keeps its secrets to itself (issue 10, findings 1, 2 and 9): the embedded
Redis requires a password generated per data dir; no secret is in any process's environment
or argv, nor in the banner, `up.json` or a log; the data dir is owner-only throughout."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import time
from pathlib import Path

import pytest
import redis

from cli.procs import descendants
from daemon.host.embedded_redis import free_port
from tests.agent.procscan import environ_and_cmdline
from tests.cli.conftest import Cli, wait_http_ok
from tests.cli.test_e2e import (
    assert_steered_and_completed,
    banner_field,
    clean_env,
    run_session,
    worktrain_argv,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

TOKEN = "up-trust-token-" + "a1b2c3d4e5" * 3
API_KEY = "sk-ant-up-trust-" + "f6e5d4c3b2" * 3


def test_up_keeps_every_secret_out_of_reach(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    data_dir = home / ".worktrain"
    port, redis_port = free_port(), free_port()
    env = clean_env(
        home, WORKTRAIN_DATA_DIR=str(data_dir), WORKTRAIN_API_TOKEN=TOKEN, ANTHROPIC_API_KEY=API_KEY
    )
    argv = [*worktrain_argv(), "up", "--model", "fake", "--port", str(port), "--redis-port", str(redis_port)]
    argv += ["--workers", "1", "--fake-latency", "0.2"]
    out_path, err_path = tmp_path / "up.out", tmp_path / "up.err"
    with out_path.open("wb") as out, err_path.open("wb") as err:
        process = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err)
    try:
        wait_http_ok(f"http://127.0.0.1:{port}/readyz", process, timeout=60)
        deadline = time.monotonic() + 10
        while "WorkTrain is up." not in out_path.read_text():
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.05)
        password = (data_dir / "redis" / "password").read_text().strip()
        assert len(password) >= 32

        # Redis answers nobody without the password (the finding: no requirepass at all).
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(port=redis_port).ping()

        cli = Cli(f"http://127.0.0.1:{port}", token=TOKEN)
        session_id, events = run_session(cli, tmp_path / "workspace")
        assert_steered_and_completed(cli, session_id, events)

        # The printed redis-cli line works as pasted, and shows no password.
        banner = out_path.read_text()
        line = banner_field(banner, "redis-cli")
        listed = subprocess.run(
            ["bash", "-c", f"{line} ZRANGE wt:sessions 0 -1"], capture_output=True, text=True
        )
        assert session_id in listed.stdout.split(), listed.stderr

        # No secret in any process of the stack: environment blocks and argument lists.
        tree = [process.pid, *(p.pid for p in descendants(process.pid))]
        assert len(tree) >= 5, tree  # up, redis, fake model, web (+ worker), worker (+ pool)
        for pid in tree:
            blob = environ_and_cmdline(pid)
            for secret in (TOKEN, API_KEY, password):
                assert secret.encode() not in blob, f"a secret in /proc/{pid}/environ or cmdline"
        texts = {"banner": banner + err_path.read_text(), "up.json": (data_dir / "up.json").read_text()}
        assert json.loads(texts["up.json"])["redisUrl"] == f"redis://127.0.0.1:{redis_port}/0"
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            process.wait(20)
    texts |= {str(p): p.read_text(errors="replace") for p in data_dir.rglob("*.log")}
    for name, text in texts.items():
        for secret in (TOKEN, API_KEY, password):
            assert secret not in text, f"a secret in {name}"
    assert_owner_only(data_dir)


def assert_owner_only(data_dir: Path) -> None:
    """Every folder 0700 and every file 0600 (the workspaces' contents are the user's)."""
    loose = []
    for path in [data_dir, *data_dir.rglob("*")]:
        if "workspaces" in path.relative_to(data_dir.parent).parts[1:2] and path.name != "workspaces":
            continue
        mode = stat.S_IMODE(path.lstat().st_mode)
        wanted = 0o700 if path.is_dir() else 0o600
        if mode & 0o077 or (path.is_dir() and mode != wanted):
            loose.append(f"{path.relative_to(data_dir)}: {oct(mode)}")
    assert loose == [], loose
    assert stat.S_IMODE(os.stat(data_dir / "redis" / "password").st_mode) == 0o600
