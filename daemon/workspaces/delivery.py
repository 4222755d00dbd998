"""Delivering a worktree session's work at its end (README's Coding sessions, docs/security.md).

The session's repository is the agent's (daemon/workspaces/worktree.py): its config,
attributes, hooks, `commondir`, `HEAD` and refs are files the agent could write, so the
worker never runs git in it. What needs git there runs in the box (daemon/workspaces/box.py:
the same sandbox as the agent's own Bash). The worker's own git runs in the main repository,
checked and configured by WorkTrain alone (daemon/workspaces/repository.py, git.py): a
`none` session working there could have written its config too. In order, each step only if
the one before succeeded:
1. commit (modes `commit` and `push`), in the box: everything not yet committed —
   `git add -A`, one commit with the goal's first line as subject and the final notes as
   body, authored by `WORKTRAIN_GIT_AUTHOR`. A failed or cancelled session's work is
   committed too, marked partial: nothing an agent did is lost.
2. fetch, by the worker in the main repository: `git fetch <session repo>
   refs/heads/<branch>:refs/heads/<branch>`, with `git-upload-pack` run in the box and
   `transfer.fsckObjects` on: the agent's objects reach the main repository only through
   a pack that git verifies, and no ref but the session's branch moves. A branch that
   existed before the session is only fast-forwarded; one the session created may be
   replaced (`+`). Then, the same way and best effort, its turns' snapshots
   (`refs/worktrain/turns/*` → `refs/worktrain/snapshots/<sid>/*`, daemon/workspaces/snapshots.py),
   so the session can still be forked once its repository is removed.
3. push (mode `push`): the branch's commit pushed from a repository WorkTrain makes for the
   push (its own config; the main repository's objects borrowed through `alternates`), to
   `WORKTRAIN_GIT_REMOTE` — a URL, or the name of a remote whose URL is read from the main
   repository's checked config — with the worker host's credentials
   (`WORKTRAIN_GIT_PUSH_CONFIG`, its SSH keys and agent), never from inside the sandbox.
4. `WORKTRAIN_DELIVERY_COMMAND` (if set, and the mode is not `none`): run with bash in the
   repository, outside the sandbox, with `WT_SESSION_ID`, `WT_BRANCH`, `WT_BASE_REF`,
   `WT_REPO`, `WT_TITLE`, `WT_BODY_FILE` (e.g. `gh pr create --head "$WT_BRANCH" ...`); every
   git it runs has hooks and fsmonitor off (`GIT_CONFIG_COUNT`) and no `ext::` transport.
5. the session's repository is removed (its branch stays), unless `keepWorktree`, a step
   failed, or mode `none` left changes in it.
Whatever fails is said in `Delivery.error`, with state `failed`; delivering never raises.
"""

from __future__ import annotations

import logging
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from daemon.schema.workspace import Delivery, DeliveryState, WorkspacePlan
from daemon.workspaces.box import Box
from daemon.workspaces.fetching import fetch_into
from daemon.workspaces.git import DEFAULT_AUTHOR, GitError, author_env, delivery_command_environment
from daemon.workspaces.placement import Placement
from daemon.workspaces.push import push_branch
from daemon.workspaces.repository import Repository
from daemon.workspaces.snapshots import deliver_snapshots
from daemon.workspaces.worktree import main_repository, remove_worktree

log = logging.getLogger(__name__)

GIT_BOX_TIMEOUT_SECONDS = 300.0
# in the box: commit what is left (the title and body come in the environment, never a shell word)
COMMIT_SCRIPT = (
    "git add -A && { git diff --cached --quiet || git commit --no-verify --no-gpg-sign -q "
    '-m "$WT_TITLE" -m "$WT_BODY"; }'
)
COMMAND_TIMEOUT_SECONDS = 600.0
DIFF_STAT_MAX_CHARS = 4000
TITLE_MAX_CHARS = 72


@dataclass(frozen=True)
class DeliverySettings:
    """The worker's delivery configuration (WORKTRAIN_GIT_AUTHOR, _GIT_REMOTE, _DELIVERY_COMMAND,
    _GIT_PUSH_CONFIG)."""

    author: str = DEFAULT_AUTHOR
    remote: str = "origin"  # a remote's name in the main repository, or a URL
    command: str | None = None
    git_timeout_seconds: float = GIT_BOX_TIMEOUT_SECONDS  # each git command run in the box
    push_config: str | None = None  # the one git config file a push reads (its credential helper)


@dataclass(frozen=True)
class Ended:
    """What delivery needs to know of the session's end."""

    session_id: str
    goal: str
    notes: str  # the last continue_workflow notes ("" when there were none)
    status: str  # completed | failed | cancelled
    outcome: str


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


def deliver(
    place: Placement,
    plan: WorkspacePlan,
    ended: Ended,
    settings: DeliverySettings,
    box: Box,
    fast_forward_only: bool = True,
) -> Delivery:
    """`fast_forward_only`: the branch existed before the session (the record's `branchExisted`)."""
    assert place.repo is not None and place.worktree is not None and place.branch is not None
    tree, branch = place.worktree, place.branch
    base_ref = place.base_ref or "HEAD"
    pushed, exit_code, error, snapshots = False, None, None, False
    title, body = message_for(ended)
    repo = main_repository(place.repo)  # checked now: a config written since placement is refused here
    try:
        if plan.deliveryMode != "none":
            commit_all(box, tree, title, body, settings)
        # its own commits, whatever the mode; then its turns' snapshots, for forks (best effort)
        fetch_branch(box, repo, tree, branch, settings.git_timeout_seconds, replace=not fast_forward_only)
        snapshots = deliver_snapshots(box, repo, tree, ended.session_id, settings.git_timeout_seconds)
        if plan.deliveryMode == "push":
            push_branch(repo, branch, settings.remote, settings.push_config, settings.git_timeout_seconds)
            pushed = True
        if settings.command and plan.deliveryMode != "none":
            exit_code = run_command(
                settings.command, repo.top, branch, base_ref, ended.session_id, title, body
            )
            if exit_code != 0:
                error = f"WORKTRAIN_DELIVERY_COMMAND exited with {exit_code}"
    except GitError as exc:
        error = str(exc)
    head, base_commit, commits, stat = _summary(repo, branch, base_ref)
    remaining: Path | None = tree
    dirty = plan.deliveryMode == "none" and _dirty(box, tree, settings.git_timeout_seconds)
    if not plan.keepWorktree and error is None and not dirty:
        try:
            remove_worktree(repo, tree)
            remaining = None
        except GitError as exc:
            error = f"the worktree could not be removed: {exc}"
    partial = ended.status != "completed"
    state: DeliveryState = "failed" if error else "partial" if partial else "delivered"
    return Delivery(
        state=state,
        branch=branch,
        baseRef=base_ref,
        baseCommit=base_commit,
        headCommit=head,
        commits=commits,
        pushed=pushed,
        remote=settings.remote if plan.deliveryMode == "push" else None,
        diffStat=stat,
        worktree=str(remaining) if remaining else None,
        snapshots=snapshots,
        commandExitCode=exit_code,
        error=error,
    )


def commit_all(box: Box, tree: Path, title: str, body: str, settings: DeliverySettings) -> None:
    """Commit everything not committed yet in `tree`, in the box (GitError: it failed)."""
    env = {**author_env(settings.author), "WT_TITLE": title, "WT_BODY": body, "GIT_TERMINAL_PROMPT": "0"}
    code, output = box.run(tree, COMMIT_SCRIPT, env, settings.git_timeout_seconds)
    if code != 0:
        raise GitError(f"the commit in the session's repository failed ({code}): {output.strip()[-800:]}")


def fetch_branch(
    box: Box, repo: Repository, tree: Path, branch: str, timeout: float, *, replace: bool
) -> None:
    """The session's branch into the main repository: only that ref moves, every object
    verified; the serving side (upload-pack) runs in the box. `replace`: the session created
    the branch (a `+` refspec); otherwise it must be a fast-forward."""
    refspec = f"{'+' if replace else ''}refs/heads/{branch}:refs/heads/{branch}"
    fetch_into(box, repo, tree, [refspec], timeout, f"worktrain: deliver {branch}")


def _dirty(box: Box, tree: Path, timeout: float) -> bool:
    code, output = box.run(tree, "git status --porcelain", {}, timeout)
    return code != 0 or bool(output.strip())  # when in doubt, keep it


def _summary(repo: Repository, branch: str, base_ref: str) -> tuple[str | None, str | None, int, str | None]:
    """(head commit, base commit, commits since the base, diff stat) of the branch; what can
    be had. The base commit is where the branch left `base_ref` (its merge base), so a `HEAD`
    that moved on since the worktree was made does not change it."""
    try:
        head = repo.run("rev-parse", f"refs/heads/{branch}")
        base = repo.run("merge-base", base_ref, head)
        commits = int(repo.run("rev-list", "--count", f"{base}..{head}"))
        stat = repo.run("diff", "--no-ext-diff", "--no-textconv", "--stat", base, head)
    except (GitError, ValueError) as exc:
        log.warning("delivery summary of %s: %s", branch, exc)
        return None, None, 0, None
    return head, base, commits, stat[-DIFF_STAT_MAX_CHARS:] or None


def run_command(
    command: str, repo: Path, branch: str, base_ref: str, session_id: str, title: str, body: str
) -> int:
    """WORKTRAIN_DELIVERY_COMMAND with the WT_* variables; its exit code (logged output)."""
    with tempfile.NamedTemporaryFile("w", prefix="worktrain-body-", suffix=".md") as body_file:
        body_file.write(body + "\n")
        body_file.flush()
        env = {
            **delivery_command_environment(os.environ),
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
