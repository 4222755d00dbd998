"""daemon/host/safefile.py read_small (issue 29 item 6): what WorkTrain reads on the agent's side never
blocks, is a regular file, and is capped — a FIFO, /dev/zero or a symlink costs nothing.
And the grants registry of daemon/sandbox/gitgrants.py."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from daemon.host.safefile import SMALL_BYTES as MAX_BYTES
from daemon.host.safefile import first_line_or_empty as first_line
from daemon.host.safefile import read_small
from daemon.sandbox import gitgrants
from daemon.workspaces.worktree import WORKTREES, list_worktrees

pytestmark = pytest.mark.unit


def test_a_fifo_a_device_a_symlink_and_a_big_file(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "zero").symlink_to("/dev/zero")
    (tmp_path / "big").write_bytes(b"ref: refs/heads/x\n" + b"y" * (MAX_BYTES * 4))
    started = time.monotonic()
    assert read_small(fifo) is None and first_line(fifo) == ""
    assert read_small(tmp_path / "zero") is None and read_small(Path("/dev/zero")) is None
    assert read_small(tmp_path) is None and read_small(tmp_path / "missing") is None
    assert len(read_small(tmp_path / "big") or b"") == MAX_BYTES
    assert first_line(tmp_path / "big") == "ref: refs/heads/x"
    assert time.monotonic() - started < 2.0


def test_listing_a_session_repository_whose_head_is_a_fifo_returns_at_once(tmp_path: Path) -> None:
    git_dir = tmp_path / WORKTREES / "sess_fifo" / ".git"
    git_dir.mkdir(parents=True)
    os.mkfifo(git_dir / "HEAD")
    started = time.monotonic()
    [found] = list_worktrees(tmp_path)
    assert found.session_id == "sess_fifo" and found.branch is None and found.head is None
    assert time.monotonic() - started < 2.0


def test_grants_registered_twice_for_one_folder_outlive_the_first_release(tmp_path: Path) -> None:
    """A `none` child works in its parent's repository: its end keeps the parent's grants."""
    tree, grant = tmp_path / "tree", tmp_path / "repo.git"
    tree.mkdir()
    gitgrants.register(tree, [grant])  # the parent
    gitgrants.register(tree, [grant])  # its child, in the same worker process
    gitgrants.unregister(tree)
    assert gitgrants.for_workspace(tree / "src") == [grant]
    gitgrants.unregister(tree)
    assert gitgrants.for_workspace(tree) == []
