"""The box the session repository's git runs in (docs/security.md): `Box` of
daemon/workspaces/box.py.

The same sandbox as the agent's own Bash (daemon/sandbox/command.py): its PID and network
namespaces, Landlock with the session's grants (its repository writable, the main
repository's git folder readable), no capability. A filter, hook or `commondir` the agent
planted runs — if it runs at all — with no more reach than the agent's own commands had.
"""

from __future__ import annotations

import contextlib
import os
import shlex
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from daemon.sandbox.command import plan_file, sandboxed
from daemon.sandbox.launch import PLAN_FROM_ENV, PLAN_PATH_ENV
from daemon.tools.bash import run_command, scrub_env

OUTPUT_CAP = 64 * 1024
# `git fetch` appends the repository's path (a quoted shell word): it becomes this script's $0
UPLOAD_PACK = 'exec git upload-pack "$0"'


@dataclass(frozen=True)
class SandboxBox:
    """The box of one session repository: its grants, fixed at placement."""

    read: tuple[Path, ...] = ()

    def run(self, tree: Path, script: str, env: Mapping[str, str], timeout: float) -> tuple[int, str]:
        result = run_command(
            script, tree, timeout, {**scrub_env(os.environ), **env}, OUTPUT_CAP, extra_read=self.read
        )
        if result.timed_out:
            return 124, f"{result.output}\n(timed out after {timeout:.0f}s)"
        return result.exit_code, result.output

    @contextlib.contextmanager
    def upload_pack(self, tree: Path) -> Iterator[tuple[str, dict[str, str]]]:
        """The line names no environment and no plan: both reach the box through the
        environment of the fetch that runs it (git hands its own to the upload-pack)."""
        with sandboxed(
            UPLOAD_PACK,
            tree,
            scrub_env(os.environ),
            read_only=True,
            read_only_mounts=[tree],
            extra_read=self.read,
        ) as box:
            argv, env = list(box.argv), dict(box.env)
            by_file = "@" + str(plan_file(box.tmpdir))
            if by_file in argv:
                env[PLAN_PATH_ENV] = by_file[1:]
                argv[argv.index(by_file)] = PLAN_FROM_ENV
            yield shlex.join(argv), env


def boxes(read: Sequence[Path]) -> SandboxBox:
    """`BoxFor` of daemon/workspaces/box.py."""
    return SandboxBox(tuple(read))
