"""Delivering a worktree session's work at its end (SPEC §4.8).

In order, each step only if the one before succeeded:
1. commit (modes `commit` and `push`): everything not yet committed in the worktree —
   `git add -A`, one commit with the goal's first line as subject and the final notes as
   body, authored by `WORKTRAIN_GIT_AUTHOR`. A failed or cancelled session's work is
   committed too, marked partial: nothing an agent did is lost.
2. push (mode `push`): `git push <remote> <branch>` from the repository, with the worker
   host's git configuration and credentials — never from inside the sandbox.
3. `WORKTRAIN_DELIVERY_COMMAND` (if set, and the mode is not `none`): run with bash in the
   repository, outside the sandbox, with `WT_SESSION_ID`, `WT_BRANCH`, `WT_BASE_REF`,
   `WT_REPO`, `WT_TITLE`, `WT_BODY_FILE` (e.g. `gh pr create --head "$WT_BRANCH" ...`).
4. the worktree is removed (its branch stays), unless `keepWorktree`, a step failed, or
   mode `none` left changes in it.
Whatever fails is said in `Delivery.error`, with state `failed`; delivering never raises.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from daemon.bus.workspacerecord import Delivery, DeliveryState, WorkspacePlan
from daemon.workspaces.git import GitError, git
from daemon.workspaces.placement import Placement
from daemon.workspaces.worktree import remove_worktree

log = logging.getLogger(__name__)

DEFAULT_AUTHOR = "WorkTrain <worktrain@localhost>"
COMMAND_TIMEOUT_SECONDS = 600.0
DIFF_STAT_MAX_CHARS = 4000
TITLE_MAX_CHARS = 72
_AUTHOR_RE = re.compile(r"^\s*(?P<name>[^<>]+?)\s*<(?P<email>[^<>\s]+)>\s*$")


@dataclass(frozen=True)
class DeliverySettings:
    """The worker's delivery configuration (WORKTRAIN_GIT_AUTHOR, _GIT_REMOTE, _DELIVERY_COMMAND)."""

    author: str = DEFAULT_AUTHOR
    remote: str = "origin"
    command: str | None = None


@dataclass(frozen=True)
class Ended:
    """What delivery needs to know of the session's end."""

    session_id: str
    goal: str
    notes: str  # the last continue_workflow notes ("" when there were none)
    status: str  # completed | failed | cancelled
    outcome: str


def author_env(author: str) -> dict[str, str]:
    """`Name <email>` as git's author and committer variables (a bad value: the default)."""
    match = _AUTHOR_RE.match(author) or _AUTHOR_RE.match(DEFAULT_AUTHOR)
    assert match is not None
    name, email = match["name"], match["email"]
    return {
        "GIT_AUTHOR_NAME": name,
        "GIT_AUTHOR_EMAIL": email,
        "GIT_COMMITTER_NAME": name,
        "GIT_COMMITTER_EMAIL": email,
    }


def message_for(ended: Ended) -> tuple[str, str]:
    """(subject, body) of the delivery commit."""
    first = next((line.strip() for line in ended.goal.splitlines() if line.strip()), "WorkTrain session")
    title = first if len(first) <= TITLE_MAX_CHARS else first[: TITLE_MAX_CHARS - 1] + "…"
    if ended.status != "completed":
        title = f"[partial] {title}"[: TITLE_MAX_CHARS + 10]
    lines = [ended.notes.strip()] if ended.notes.strip() else []
    if ended.status != "completed":
        lines.append(f"The session ended {ended.status} ({ended.outcome}): this is its work so far.")
    lines.append(f"WorkTrain-Session: {ended.session_id}")
    return title, "\n\n".join(lines)


def deliver(place: Placement, plan: WorkspacePlan, ended: Ended, settings: DeliverySettings) -> Delivery:
    assert place.repo is not None and place.worktree is not None and place.branch is not None
    repo, tree, branch = place.repo, place.worktree, place.branch
    base_ref = place.base_ref or "HEAD"
    partial = ended.status != "completed"
    pushed, exit_code, error = False, None, None
    title, body = message_for(ended)
    try:
        if plan.deliveryMode != "none":
            commit_all(tree, title, body, settings.author)
        if plan.deliveryMode == "push":
            git(repo, "push", "--no-verify", settings.remote, f"refs/heads/{branch}:refs/heads/{branch}")
            pushed = True
        if settings.command and plan.deliveryMode != "none":
            exit_code = run_command(settings.command, repo, branch, base_ref, ended.session_id, title, body)
            if exit_code != 0:
                error = f"WORKTRAIN_DELIVERY_COMMAND exited with {exit_code}"
    except GitError as exc:
        error = str(exc)
    head, commits, stat = _summary(repo, branch, base_ref)
    remaining: Path | None = tree
    dirty = plan.deliveryMode == "none" and _dirty(tree)
    if not plan.keepWorktree and error is None and not dirty:
        try:
            remove_worktree(repo, tree)
            remaining = None
        except GitError as exc:
            error = f"the worktree could not be removed: {exc}"
    state: DeliveryState = "failed" if error else "partial" if partial else "delivered"
    return Delivery(
        state=state,
        branch=branch,
        baseRef=base_ref,
        headCommit=head,
        commits=commits,
        pushed=pushed,
        remote=settings.remote if plan.deliveryMode == "push" else None,
        diffStat=stat,
        worktree=str(remaining) if remaining else None,
        commandExitCode=exit_code,
        error=error,
    )


def commit_all(tree: Path, title: str, body: str, author: str) -> bool:
    """Commit everything not committed yet in `tree`; whether there was anything."""
    git(tree, "add", "-A")
    if not git(tree, "status", "--porcelain", "--untracked-files=no"):
        return False
    git(tree, "commit", "--no-verify", "--no-gpg-sign", "-q", "-m", title, "-m", body, env=author_env(author))
    return True


def _dirty(tree: Path) -> bool:
    try:
        return bool(git(tree, "status", "--porcelain"))
    except GitError:
        return True  # when in doubt, keep it


def _summary(repo: Path, branch: str, base_ref: str) -> tuple[str | None, int, str | None]:
    """(head commit, commits since the base, diff stat) of the branch; what can be had."""
    try:
        head = git(repo, "rev-parse", f"refs/heads/{branch}")
        base = git(repo, "merge-base", base_ref, head)
        commits = int(git(repo, "rev-list", "--count", f"{base}..{head}"))
        stat = git(repo, "diff", "--stat", base, head)[-DIFF_STAT_MAX_CHARS:]
    except (GitError, ValueError) as exc:
        log.warning("delivery summary of %s: %s", branch, exc)
        return None, 0, None
    return head, commits, stat or None


def run_command(
    command: str, repo: Path, branch: str, base_ref: str, session_id: str, title: str, body: str
) -> int:
    """WORKTRAIN_DELIVERY_COMMAND with the WT_* variables; its exit code (logged output)."""
    with tempfile.NamedTemporaryFile("w", prefix="worktrain-body-", suffix=".md") as body_file:
        body_file.write(body + "\n")
        body_file.flush()
        env = {
            **os.environ,
            "WT_SESSION_ID": session_id,
            "WT_BRANCH": branch,
            "WT_BASE_REF": base_ref,
            "WT_REPO": str(repo),
            "WT_TITLE": title,
            "WT_BODY_FILE": body_file.name,
        }
        try:
            done = subprocess.run(
                ["/bin/bash", "-c", command],
                cwd=repo,
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=COMMAND_TIMEOUT_SECONDS,
            )
        except subprocess.TimeoutExpired:
            log.error("delivery command for %s timed out after %ss", session_id, COMMAND_TIMEOUT_SECONDS)
            return 124
    log.info(
        "delivery command for %s exited %d: %s",
        session_id,
        done.returncode,
        (done.stdout + done.stderr)[-2000:],
    )
    return done.returncode
