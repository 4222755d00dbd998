"""Secrets out of every process's environment block and argument list (docs/security.md).

An agent's Bash runs as the worker's user, and `/proc/<pid>/environ` of a same-user process
shows the environment that process was *started* with — `os.environ.pop` does not change
it. So each long-lived WorkTrain process (`up`, `web`, `worker`) calls `seal(role)` first:

1. it takes the secrets handed to it by its parent through an inherited pipe (the fd named
   by `WORKTRAIN_SECRETS_FD`), and the ones in its own environment (`ANTHROPIC_API_KEY`,
   `WORKTRAIN_API_TOKEN`, `REDIS_PASSWORD`, and a password inside `REDIS_URL`, which is
   split off: the URL without it is no secret);
2. if its environment held any, it re-executes itself (same pid, same argv) with an
   environment without them, handing them to its new image through a fresh pipe;
3. it keeps only the secrets its role uses (`ROLE_SECRETS`: workers never hold the API
   token) in this module's memory, where `daemon.host.config.load_settings` finds them; forked
   children (granian and gunicorn workers, RQ workers and work horses) inherit that memory;
4. it makes itself non-dumpable (PR_SET_DUMPABLE 0): a same-user process that can see it
   (no PID namespace) can read neither its memory nor its environ.

A parent that starts a WorkTrain child (the `up` supervisor) hands secrets on with
`pipe_for(names)`: the values travel in a pipe, never in argv or the child's environment.

The triggers file (README's Triggers) names more variables that hold secrets (`secretEnv`,
`tokenEnv`): `declare` adds them, by role, before `seal` (the web keeps the webhook
secrets, a worker the API tokens, `up` all of them), and they leave the environment block
the same way. `value(name)` reads one: what this process holds, else its environment (a
process that was not sealed: a test running a command in-process).
Standard library only; imported before anything heavy.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

from daemon.host.prctl import PR_SET_DUMPABLE, prctl

log = logging.getLogger(__name__)

FD_VARIABLE = "WORKTRAIN_SECRETS_FD"
API_KEY = "ANTHROPIC_API_KEY"
API_TOKEN = "WORKTRAIN_API_TOKEN"
REDIS_PASSWORD = "REDIS_PASSWORD"
REDIS_URL = "REDIS_URL"
WEBHOOK_SECRET = "WORKTRAIN_WEBHOOK_SECRET"  # signs webhook bodies (README's Webhooks): workers send them
SECRET_VARIABLES = (API_KEY, API_TOKEN, REDIS_PASSWORD, WEBHOOK_SECRET)
ROLE_SECRETS: dict[str, frozenset[str]] = {
    "web": frozenset({API_TOKEN, REDIS_PASSWORD}),
    "worker": frozenset({API_KEY, REDIS_PASSWORD, WEBHOOK_SECRET}),
    "up": frozenset(SECRET_VARIABLES),
    "mcp": frozenset({API_TOKEN}),  # `worktrain mcp`: a client of the API, like the CLI
}
MAX_PIPE_BYTES = 60_000  # below the pipe's capacity: writing never blocks before the exec

_held: dict[str, str] = {}
_declared: dict[str, frozenset[str]] = {}  # role -> variables a triggers file names (README's Triggers)
# Never a secret's variable: the process needs them where they are (a file naming one is refused)
NOT_SECRETS = frozenset(
    {"PATH", "HOME", "USER", "SHELL", "LANG", "TERM", "PWD", "TMPDIR", "PYTHONPATH", REDIS_URL}
)


class SecretsError(RuntimeError):
    """The secrets hand-off failed (an unreadable pipe, secrets too large for one)."""


def declare(names: Mapping[str, frozenset[str]]) -> None:
    """More variables that hold secrets, by the role that keeps them (`web`, `worker`)."""
    for role, more in names.items():
        _declared[role] = _declared.get(role, frozenset()) | frozenset(more - NOT_SECRETS)


def _secret_names() -> frozenset[str]:
    return frozenset(SECRET_VARIABLES).union(*_declared.values())


def value(name: str) -> str | None:
    """A secret by its variable's name: held by this process, else in its environment."""
    return _held.get(name) or os.environ.get(name) or None


def held() -> Mapping[str, str]:
    """The secrets this process holds (variable name -> value), after `seal`."""
    return dict(_held)


def split_url_password(url: str) -> tuple[str, str | None]:
    """(`url` without its password, the password or None): `redis://:pw@h:1/0` -> `redis://h:1/0`."""
    parts = urlsplit(url)
    userinfo, at, hostport = parts.netloc.rpartition("@")
    if not at:
        return url, None
    user, colon, password = userinfo.partition(":")
    if not colon:
        return url, None
    netloc = f"{user}@{hostport}" if user else hostport
    return urlunsplit(parts._replace(netloc=netloc)), unquote(password)


def secrets_in(environ: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(the secrets found in `environ`, the environment without them)."""
    names = _secret_names()
    found = {name: environ[name] for name in names if environ.get(name)}
    clean = {name: value for name, value in environ.items() if name not in names}
    clean.pop(FD_VARIABLE, None)
    if REDIS_URL in environ:
        url, password = split_url_password(environ[REDIS_URL])
        if password:
            clean[REDIS_URL] = url
            found.setdefault(REDIS_PASSWORD, password)
    return found, clean


def pipe_for(secrets: Mapping[str, str]) -> tuple[int, dict[str, str]]:
    """A pipe holding `secrets` for a child: (its read end, to inherit, and the variable
    naming it). The caller passes the fd to the child (`pass_fds`) and closes its copy."""
    payload = json.dumps(dict(secrets)).encode()
    if len(payload) > MAX_PIPE_BYTES:
        raise SecretsError(f"secrets too large to hand over ({len(payload)} bytes)")
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, payload)
    finally:
        os.close(write_end)
    os.set_inheritable(read_end, True)
    return read_end, {FD_VARIABLE: str(read_end)}


def _read_inherited(environ: Mapping[str, str]) -> dict[str, str]:
    raw_fd = environ.get(FD_VARIABLE)
    if not raw_fd:
        return {}
    try:
        fd = int(raw_fd)
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        os.close(fd)
        value = json.loads(b"".join(chunks))
    except (ValueError, OSError) as exc:
        raise SecretsError(f"cannot read the secrets handed over on fd {raw_fd}: {exc}") from exc
    if not isinstance(value, dict):
        raise SecretsError(f"the secrets handed over on fd {raw_fd} are not a JSON object")
    return {str(k): str(v) for k, v in value.items()}


def _reexec(secrets: Mapping[str, str], environ: dict[str, str]) -> None:
    """Replace this process with itself (same pid and argv), without secrets in its environment."""
    _read_end, variable = pipe_for(secrets)  # inherited by the new image
    environ.update(variable)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, sys.orig_argv, environ)


def keep(role: str, secrets: Mapping[str, str]) -> dict[str, str]:
    declared = frozenset().union(*_declared.values()) if role == "up" else _declared.get(role, frozenset())
    allowed = ROLE_SECRETS[role] | declared
    return {name: value for name, value in secrets.items() if name in allowed}


def is_entry_process() -> bool:
    """Whether this process is a `worktrain` command (the console script or `python -m cli`),
    as opposed to a program that runs a command in-process (click's CliRunner in tests)."""
    script = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path()
    return script.name == "worktrain" or (script.name == "__main__.py" and script.parent.name == "cli")


def seal(role: str, extra: Mapping[str, str] | None = None) -> Mapping[str, str]:
    """Take this process's secrets out of its environment (re-executing it when they were
    in it), keep those of `role`, make the process non-dumpable; returns what it keeps.

    `extra` adds secrets read elsewhere. Idempotent. Run in-process by another program (not
    `is_entry_process`), it only returns the secrets and changes nothing of the process."""
    inherited = _read_inherited(os.environ)
    found, clean = secrets_in(os.environ)
    secrets = keep(role, {**inherited, **found, **(extra or {})})
    if not is_entry_process():
        return secrets
    if found:
        _reexec(secrets, clean)  # does not return
    os.environ.pop(FD_VARIABLE, None)
    _held.clear()
    _held.update(secrets)
    if not prctl(PR_SET_DUMPABLE, 0):
        log.warning("could not make the process non-dumpable (not Linux?)")
    return held()


def without_secrets(environ: Mapping[str, str]) -> dict[str, str]:
    """An environment for a child that must not see a secret by name (no pipe either)."""
    return secrets_in(environ)[1]
