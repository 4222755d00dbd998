"""daemon/host/secrets.py: what counts as a secret, who keeps which, and the pipe between them."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from daemon.host import secrets

pytestmark = pytest.mark.unit


def test_a_password_in_redis_url_is_split_off() -> None:
    assert secrets.split_url_password("redis://:p%40ss@h:1/0") == ("redis://h:1/0", "p@ss")
    assert secrets.split_url_password("redis://user:pw@h:1/0") == ("redis://user@h:1/0", "pw")
    assert secrets.split_url_password("redis://h:1/0") == ("redis://h:1/0", None)
    assert secrets.split_url_password("redis://user@h:1/0") == ("redis://user@h:1/0", None)
    found, clean = secrets.secrets_in(
        {"REDIS_URL": "redis://:pw@h:1/0", "ANTHROPIC_API_KEY": "k", "PATH": "/bin"}
    )
    assert found == {"REDIS_PASSWORD": "pw", "ANTHROPIC_API_KEY": "k"}
    assert clean == {"REDIS_URL": "redis://h:1/0", "PATH": "/bin"}


def test_workers_never_keep_the_api_token_and_web_never_the_api_key() -> None:
    every = {"ANTHROPIC_API_KEY": "k", "WORKTRAIN_API_TOKEN": "t", "REDIS_PASSWORD": "p"}
    assert secrets.keep("worker", every) == {"ANTHROPIC_API_KEY": "k", "REDIS_PASSWORD": "p"}
    assert secrets.keep("web", every) == {"WORKTRAIN_API_TOKEN": "t", "REDIS_PASSWORD": "p"}
    assert secrets.keep("up", every) == every


@pytest.mark.processes
def test_the_pipe_hands_secrets_to_a_child_that_finds_none_in_its_environment() -> None:
    fd, env = secrets.pipe_for({"REDIS_PASSWORD": "from-the-pipe"})
    probe = "from daemon.host import secrets; print(dict(secrets._read_inherited(__import__('os').environ)))"
    try:
        done = subprocess.run(
            [sys.executable, "-c", probe],
            env={**os.environ, **env},
            pass_fds=(fd,),
            capture_output=True,
            text=True,
        )
    finally:
        os.close(fd)
    assert done.stdout.strip() == "{'REDIS_PASSWORD': 'from-the-pipe'}", done.stderr


def test_in_process_seal_changes_nothing(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("WORKTRAIN_API_TOKEN", "t" * 40)
    assert secrets.seal("web")["WORKTRAIN_API_TOKEN"] == "t" * 40  # pytest is not a worktrain command
    assert os.environ["WORKTRAIN_API_TOKEN"] == "t" * 40 and secrets.held() == {}
