"""The API token of `worktrain up` (docs/security.md: the stack on one machine is never open).

`up` always runs with a token: the one given (`WORKTRAIN_API_TOKEN`), else the one generated
once per data dir and kept in `<data dir>/api-token` (owner-only, 0600, in a 0700 folder).
The CLI, `worktrain console` and `worktrain mcp` on the same machine read it from there
when they talk to that `up` (cli/client.py); the web tier gets it through the secrets pipe;
workers and agents never get it (daemon/host/secrets.py `ROLE_SECRETS`), and an agent's
commands cannot read the data dir (the sandbox, docs/security.md).

Standard library only: the client commands import it and must start fast.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

TOKEN_FILE = "api-token"
TOKEN_BYTES = 32  # token_urlsafe(32): 43 characters, 256 bits


def token_file(data_dir: Path) -> Path:
    return data_dir / TOKEN_FILE


def read_token(data_dir: Path) -> str | None:
    """The token kept in `data_dir`, or None when there is none (or it is not ours to read)."""
    try:
        value = token_file(data_dir).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return value or None


def load_or_create_token(data_dir: Path) -> str:
    """The token kept in `data_dir`; generated and written owner-only the first time."""
    from daemon.host.private import private_dir

    path = token_file(private_dir(data_dir))
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        os.chmod(path, 0o600)
        value = read_token(data_dir)
        if value is None:
            raise RuntimeError(
                f"{path} is empty or unreadable; delete it to have a new one generated"
            ) from None
        return value
    value = secrets.token_urlsafe(TOKEN_BYTES)
    with os.fdopen(fd, "w", encoding="ascii") as handle:
        handle.write(value + "\n")
    return value
