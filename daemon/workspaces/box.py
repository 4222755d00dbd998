"""The box the session's repository's git runs in (docs/security.md): an interface, given by the
session layer (daemon/session/gitbox.py: the same sandbox as the agent's own Bash).

Every git command that reads a session repository's config, attributes or hooks — its
checkout when it is made, the commit of what is left, the upload-pack serving its branch —
runs in it: whatever a file there makes git run, runs with no more reach than the agent's
own commands had.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol


class Box(Protocol):
    """The agent's sandbox, for the git that touches the session's repository."""

    def run(self, tree: Path, script: str, env: Mapping[str, str], timeout: float) -> tuple[int, str]:
        """`bash -c script` in `tree`, confined like the agent's Bash: (exit code, output)."""
        ...

    def upload_pack(self, tree: Path) -> AbstractContextManager[tuple[str, dict[str, str]]]:
        """A `--upload-pack` command line that serves `tree` from inside the box, and the
        environment the fetch that runs it must have (the box's: it is not on the line)."""
        ...


# the box of a session repository, from the read grants fixed for it (the main repository's git folder)
BoxFor = Callable[[Sequence[Path]], Box]
