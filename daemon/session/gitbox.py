"""The box delivery runs the session repository's git in (docs/security.md, issue 29).

The same sandbox as the agent's own Bash (daemon/sandbox/command.py): its PID and network
namespaces, Landlock with the session's grants (its repository writable, the main
repository's git folder readable), no capability. A filter, hook or `commondir` the agent
planted runs — if it runs at all — with no more reach than the agent's own commands had.
"""

from __future__ import annotations

import contextlib
import os
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from daemon.sandbox.command import sandboxed
from daemon.tools.bash import run_command, scrub_env

OUTPUT_CAP = 64 * 1024
# `git fetch` appends the repository's path (a quoted shell word): it becomes this script's $0
UPLOAD_PACK = 'exec git upload-pack "$0"'


@dataclass(frozen=True)
class SandboxBox:
    """`Box` of daemon/workspaces/delivery.py: the session's grants, fixed at placement."""

    read: tuple[Path, ...] = ()

    def run(self, tree: Path, script: str, env: Mapping[str, str], timeout: float) -> tuple[int, str]:
        result = run_command(
            script, tree, timeout, {**scrub_env(os.environ), **env}, OUTPUT_CAP, extra_read=self.read
        )
        if result.timed_out:
            return 124, f"{result.output}\n(timed out after {timeout:.0f}s)"
        return result.exit_code, result.output

    @contextlib.contextmanager
    def upload_pack(self, tree: Path) -> Iterator[str]:
        with sandboxed(
            UPLOAD_PACK,
            tree,
            scrub_env(os.environ),
            read_only=True,
            read_only_mounts=[tree],
            extra_read=self.read,
        ) as box:
            environment = [f"{key}={value}" for key, value in box.env.items()]
            yield shlex.join(["env", "-i", *environment, *box.argv])
