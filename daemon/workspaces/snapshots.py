"""A worktree session's snapshots: its worktree at each turn's end, kept so that a fork can
start from any turn exactly (README's "Fork a session", docs/security.md).

**Taking one** (at every turn end, before the drain): a commit on a hidden ref of the
session's OWN repository, `refs/worktrain/turns/<n>` — never on its branch, never a
delivery, never in the main repository while the session runs. It is made in the box (the
repository's config, attributes and hooks are the agent's: daemon/workspaces/box.py), into
an index of its own seeded from the real one (and kept from turn to turn), so it costs a
stat of every file, a walk for untracked ones, a hash of what changed since the last turn
and a `write-tree` of the trees on its paths — not a copy:

    staged  = commit-tree(write-tree of a copy of the real index,             parent HEAD)
    commit  = commit-tree(write-tree of the snapshots' index after `git add -A`, parents HEAD, staged)

So the snapshot holds three things: HEAD (what the agent had committed, first parent), the
index (what it had staged, second parent) and the worktree (its tree: tracked files as they
are, untracked ones too; ignored files are not in it). The real index, HEAD and branch are
not touched.

**Keeping them** (a long session is bounded): the last `KEEP_LAST` turns' refs and every
`KEEP_EVERY`-th turn's before them — at most KEEP_LAST + n / KEEP_EVERY refs after n turns.
Each turn drops the one ref that just left the window (`dropped_turn`); the turn mark in
Redis loses its `snap:` in the same drain (turn_ended.lua). A snapshot that cannot be made
(a conflicted index, no HEAD) is logged and the session goes on: that turn has none.

**At delivery** the session's snapshot refs are fetched into the main repository under
`refs/worktrain/snapshots/<sid>/<n>` (best effort, the same box-run upload-pack as the
branch), so a session whose repository was removed after delivery can still be forked.

**Restoring one** (a fork's first placement, daemon/workspaces/worktree.py): the snapshot
commit is pinned in the main repository at `refs/worktrain/forks/<forkId>` (found there, or
fetched from the repository that holds it with the box-run upload-pack); the fork's
repository is made on its own branch at the snapshot's first parent and checked out in the
box with worktree.py's `RESTORE_SCRIPT`: worktree = the snapshot's tree, index = its second
parent's.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from daemon.schema.turnmarks import Snapshot, SnapshotRef
from daemon.workspaces.box import Box
from daemon.workspaces.fetching import fetch_into
from daemon.workspaces.git import GitError, author_env
from daemon.workspaces.repository import Repository
from daemon.workspaces.worktree import worktree_path

log = logging.getLogger(__name__)

KEEP_LAST = 20  # the newest turns whose snapshots are all kept
KEEP_EVERY = 10  # ... and before them, every KEEP_EVERY-th turn's
SNAPSHOT_TIMEOUT_SECONDS = 60.0  # at most (a delivery's git timeout, when shorter)
TIMED_OUT = 124  # the box's exit code for a command past its timeout (daemon/session/gitbox.py)
TURNS_REF = "refs/worktrain/turns"
SNAPSHOTS_REF = "refs/worktrain/snapshots"  # in the main repository: <sid>/<n>, fetched at delivery
FORKS_REF = "refs/worktrain/forks"  # in the main repository: a fork's starting point, pinned
_COMMIT = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")

# In the box, in the session repository's top. The real index is only read (copied into the
# command's private TMPDIR for the staged tree). The worktree's tree is written from an index
# of the snapshots' own, kept in the session's git folder between turns and seeded from the
# real index at the first: `git add -A` then hashes only what changed since the last turn,
# untracked files included (seeded from the real index each turn, every untracked file would
# be hashed again every turn). Environment: WT_TURN, WT_DROP (a turn whose ref goes, or
# empty), git's author and committer.
SNAPSHOT_SCRIPT = r"""set -eu
real=$(git rev-parse --git-path index)
kept=$(git rev-parse --git-path worktrain-snapshot-index)
staged_index="$TMPDIR/worktrain-staged-index"
if [ -f "$real" ]; then cp -- "$real" "$staged_index"; else rm -f -- "$staged_index"; fi
if [ ! -f "$kept" ] && [ -f "$real" ]; then cp -- "$real" "$kept"; fi
head=$(git rev-parse -q --verify 'HEAD^{commit}')
staged=$(GIT_INDEX_FILE="$staged_index" git write-tree)
staged=$(git commit-tree "$staged" -p "$head" -m "WorkTrain: the index at the end of turn $WT_TURN")
GIT_INDEX_FILE="$kept" git add -A
tree=$(GIT_INDEX_FILE="$kept" git write-tree)
commit=$(git commit-tree "$tree" -p "$head" -p "$staged" -m "WorkTrain snapshot: turn $WT_TURN")
git update-ref -m "worktrain: snapshot of turn $WT_TURN" "refs/worktrain/turns/$WT_TURN" "$commit"
if [ -n "$WT_DROP" ]; then git update-ref -d "refs/worktrain/turns/$WT_DROP" 2>/dev/null || true; fi
printf 'snapshot %s\n' "$commit"
"""


def dropped_turn(turn: int) -> int | None:
    """The turn whose snapshot leaves the keep window when `turn`'s is taken (None: none)."""
    leaving = turn - KEEP_LAST
    return leaving if leaving >= 1 and leaving % KEEP_EVERY != 0 else None


class SnapshotTimedOut(GitError):
    """The snapshot outlived its timeout (the agent may have made its repository hang git)."""


def take_snapshot(
    box: Box, tree: Path, turn: int, author: str, timeout: float = SNAPSHOT_TIMEOUT_SECONDS
) -> Snapshot:
    """Snapshot the session repository `tree` at the end of `turn` (GitError: not made)."""
    dropped = dropped_turn(turn)
    env = {**author_env(author), "WT_TURN": str(turn), "WT_DROP": str(dropped or "")}
    code, output = box.run(tree, SNAPSHOT_SCRIPT, env, timeout)
    found = [line.split()[1] for line in output.splitlines() if line.startswith("snapshot ")]
    if code == TIMED_OUT:
        raise SnapshotTimedOut(f"the snapshot of turn {turn} took longer than {timeout:.0f}s")
    if code != 0 or len(found) != 1 or not _COMMIT.match(found[0]):
        raise GitError(f"the snapshot of turn {turn} failed ({code}): {output.strip()[-600:]}")
    return Snapshot(found[0], dropped)


def snapshot_refspec(session_id: str) -> str:
    """The session repository's snapshot refs, into the main repository under its id."""
    return f"+{TURNS_REF}/*:{SNAPSHOTS_REF}/{session_id}/*"


def deliver_snapshots(box: Box, repo: Repository, tree: Path, session_id: str, timeout: float) -> bool:
    """Best effort, after the branch: the snapshots into the main repository, so a fork can
    be made once the session's repository is gone (whether they were). A failure is logged,
    never the delivery's."""
    try:
        reflog = f"worktrain: snapshots {session_id}"
        fetch_into(box, repo, tree, [snapshot_refspec(session_id)], timeout, reflog)
    except GitError as exc:
        log.warning("session %s: its snapshots stay in its repository only: %s", session_id, exc)
        return False
    return True


def pin_snapshot(
    repo: Repository, fork_id: str, snapshot: SnapshotRef, source_box: Box, timeout: float
) -> str:
    """Make the snapshot commit reachable in the main repository as `refs/worktrain/forks/<fork>`
    (found there already — delivered, or pinned by an earlier attempt or fork — or fetched
    from the repository of the session that holds it); returns its ref. GitError with the
    reason when it cannot be had (that repository gone and its snapshots never delivered,
    or the ref pruned or moved)."""
    pinned = f"{FORKS_REF}/{fork_id}"
    if not repo.ok("cat-file", "-e", f"{snapshot.commit}^{{commit}}"):
        holder = worktree_path(repo.top, snapshot.sessionId)
        if not holder.is_dir() or holder.is_symlink():
            raise GitError(
                f"the snapshot of turn {snapshot.turn} of {snapshot.sessionId} is gone: its repository was "
                "removed and its snapshots were not delivered into the main repository"
            )
        source = f"{TURNS_REF}/{snapshot.turn}"
        fetch_into(source_box, repo, holder, [f"+{source}:{pinned}"], timeout, f"worktrain: fork {fork_id}")
        if repo.run("rev-parse", "--verify", f"{pinned}^{{commit}}") != snapshot.commit:
            raise GitError(
                f"the snapshot ref of turn {snapshot.turn} in {snapshot.sessionId}'s repository no longer "
                "names the snapshot its turn recorded (it was moved or pruned)"
            )
    repo.run("update-ref", pinned, snapshot.commit)
    return pinned
