"""A repository the worker's own git may run in: found from a workspace, its config checked
(docs/security.md, "The worker's own git").

`Repository.at(workspace)` finds the repository holding a workspace and checks its local
config — `<common dir>/config`, and `<git dir>/config.worktree` when
`extensions.worktreeConfig` is on — against daemon/workspaces/gitconfig.py's allowlist:
a key outside it raises `UnsafeRepository`, naming the keys. The files are read as data
(regular files only, never blocking, capped; a symlink is refused) and parsed by
`git config --file - --no-includes`, so an `include.path` is a key to refuse, never a file to
follow. Every `run` checks again when a file's stamp changed since the last check. Between
that check and git's own read a session could still swap the file: what keeps that swap
harmless is the runner's configuration (daemon/workspaces/git.py), which no file overrides;
the allowlist is the second lock and the clear error.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from daemon.host.safefile import UnsafeFile, read_regular
from daemon.workspaces.git import GIT_TIMEOUT_SECONDS, GitError, git
from daemon.workspaces.gitconfig import (
    ALLOWLIST_TEXT,
    parse_listing,
    refused_keys,
    worktree_config_enabled,
)

CONFIG_CAP_BYTES = 1 << 20
DISCOVERY_TIMEOUT_SECONDS = 30.0
NAMED_KEYS_MAX = 8
KEY_CHARS_MAX = 80
Stamp = tuple[int, int, int, int, int]


class UnsafeRepository(GitError):
    """The repository's own config holds keys outside the allowlist (or cannot be read as data)."""


class NotARepository(GitError):
    """The workspace is in no git repository."""


def _stamp(path: Path) -> Stamp | None:
    try:
        s = os.lstat(path)
    except FileNotFoundError:
        return None
    return (s.st_dev, s.st_ino, s.st_size, s.st_mtime_ns, s.st_ctime_ns)


def _entries(path: Path) -> list[tuple[str, str]]:
    """The (key, value) pairs of one config file, read as data."""
    try:
        text = read_regular(path, CONFIG_CAP_BYTES, follow=False)
    except FileNotFoundError:
        return []
    except (UnsafeFile, OSError) as exc:
        raise UnsafeRepository(f"{path} cannot be read as a plain config file ({exc}); not used") from None
    listing = git(
        Path("/"), "config", "--file", "-", "--list", "--null", "--no-includes",
        stdin=text.decode("utf-8", errors="surrogateescape"),
    )  # fmt: skip
    return parse_listing(listing)


def _refuse_unreadable_config(workspace: Path) -> None:
    """UnsafeRepository when the nearest `.git` folder above `workspace` has a config that is
    not a plain file (git's own discovery would block on a FIFO before any check of ours)."""
    for folder in (workspace, *workspace.resolve().parents):
        config = folder / ".git" / "config"
        try:
            mode = os.lstat(config).st_mode
        except (FileNotFoundError, NotADirectoryError):
            if os.path.lexists(folder / ".git"):
                return
            continue
        if not stat.S_ISREG(mode):
            raise UnsafeRepository(f"{config} cannot be read as a plain config file; not used")
        return


def _named(keys: list[str]) -> str:
    shown = [key if len(key) <= KEY_CHARS_MAX else key[: KEY_CHARS_MAX - 1] + "…" for key in keys]
    more = len(keys) - NAMED_KEYS_MAX
    return ", ".join(shown[:NAMED_KEYS_MAX]) + (f" and {more} more" if more > 0 else "")


@dataclass
class Repository:
    """A repository whose config passed the check; `run` is the worker's git in it."""

    top: Path
    git_dir: Path
    common_dir: Path
    _stamps: dict[Path, Stamp | None] = field(default_factory=dict, repr=False)

    @classmethod
    def at(cls, workspace: Path) -> Repository:
        """The repository holding `workspace`, checked (NotARepository, UnsafeRepository)."""
        if not workspace.is_dir():
            raise NotARepository(f"{workspace} does not exist")
        _refuse_unreadable_config(workspace)  # before git itself reads it (a FIFO would hang it)
        try:
            found = git(
                workspace, "rev-parse", "--path-format=absolute", "--git-dir", "--git-common-dir",
                "--show-toplevel", timeout=DISCOVERY_TIMEOUT_SECONDS,
            )  # fmt: skip
            git_dir, common, top = found.splitlines()
        except (GitError, ValueError):
            raise NotARepository(
                f"{workspace} is not in a git repository (branchStrategy worktree needs one)"
            ) from None
        repository = cls(Path(top), Path(git_dir), Path(common))
        repository.check()
        return repository

    def config_files(self, entries: list[tuple[str, str]]) -> list[Path]:
        files = [self.common_dir / "config"]
        if worktree_config_enabled(entries):
            files.append(self.git_dir / "config.worktree")
        return files

    def check(self) -> None:
        """UnsafeRepository when a config file holds a key outside the allowlist."""
        main = self.common_dir / "config"
        stamps = {main: _stamp(main)}
        entries = _entries(main)
        refused = refused_keys(entries)
        for extra in self.config_files(entries)[1:]:
            stamps[extra] = _stamp(extra)
            refused += [key for key in refused_keys(_entries(extra)) if key not in refused]
        if refused:
            raise UnsafeRepository(
                f"the repository {self.top} has git config keys WorkTrain's own git does not run with: "
                f"{_named(refused)} (in {main}). A session working in this repository could have "
                f"written them. Remove them (git config --unset KEY), or dispatch without a worktree "
                f"(branchStrategy none or read-only). Allowed: {ALLOWLIST_TEXT}."
            )
        self._stamps = stamps

    def _recheck(self) -> None:
        if not self._stamps or any(_stamp(path) != stamp for path, stamp in self._stamps.items()):
            self.check()

    def run(
        self, *args: str, env: Mapping[str, str] | None = None, timeout: float = GIT_TIMEOUT_SECONDS
    ) -> str:
        """`git args` at the repository's top, its config checked again if it changed."""
        self._recheck()
        return git(self.top, *args, env=env, timeout=timeout)

    def ok(self, *args: str) -> bool:
        try:
            self.run(*args)
        except UnsafeRepository:
            raise
        except GitError:
            return False
        return True
