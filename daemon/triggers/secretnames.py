"""The variables a triggers file names for its secrets, read before a process seals its own
(daemon/host/secrets.py): the web keeps the webhook secrets (`secretEnv`), a worker the API
tokens (`tokenEnv`), `up` both. Light on purpose (PyYAML only): it runs first thing in
`worktrain web`, `worker` and `up`, before the re-exec that takes secrets out of the
environment. Best effort: a file it cannot read names nothing here; the full reading
(daemon/triggers/setup.py) reports its problems once the process has started.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

FILE_VARIABLE = "WORKTRAIN_TRIGGERS_FILE"
DEFAULT_NAME = "triggers.yml"
MAX_FILE_BYTES = 1024 * 1024


def triggers_path(data_dir: Path, named: Path | None) -> tuple[Path, bool]:
    """(the triggers file, whether it was named: a named file must exist)."""
    return (named, True) if named is not None else (data_dir / DEFAULT_NAME, False)


def path_from(environ: Mapping[str, str]) -> Path:
    named = environ.get(FILE_VARIABLE)
    data_dir = Path(environ.get("WORKTRAIN_DATA_DIR") or Path.home() / ".worktrain").expanduser()
    return triggers_path(data_dir, Path(named).expanduser() if named else None)[0]


def declared_secrets(environ: Mapping[str, str]) -> dict[str, frozenset[str]]:
    """{"web": webhook secrets' variables, "worker": API tokens' variables}."""
    import yaml

    try:
        with open(path_from(environ), "rb") as file:
            data = yaml.safe_load(file.read(MAX_FILE_BYTES))
    except (OSError, yaml.YAMLError):
        return {}
    entries = [entry for entry in data if isinstance(entry, dict)] if isinstance(data, list) else []

    def named(field: str) -> frozenset[str]:
        return frozenset(value for e in entries if isinstance(value := e.get(field), str) and value)

    return {"web": named("secretEnv"), "worker": named("tokenEnv")}


def seal_with_triggers(role: str) -> Mapping[str, str]:
    """`seal(role)` with the triggers file's variables declared as secrets first."""
    from daemon.host import secrets

    secrets.declare(declared_secrets(os.environ))
    return secrets.seal(role)
