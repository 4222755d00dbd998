"""Pushing a delivered branch (README's Coding sessions, docs/security.md): from a repository
WorkTrain makes for the push, never with the main repository's config.

The main repository's config may be a session's (a `none` session working there): a
`url.*.pushInsteadOf`, `credential.helper` or `http.cookieFile` in it would send the branch,
or the operator's credentials, where the session chose. So the push runs in a bare
repository made for it in the worker's private runtime folder, whose config is git's
default, which borrows the main repository's objects (`objects/info/alternates`: read as
data) and pushes the branch's commit by its id. The only other config it reads is the
operator's `WORKTRAIN_GIT_PUSH_CONFIG` (a credential helper, say); its SSH keys and agent,
`GIT_SSH_COMMAND` and `GIT_ASKPASS` come from the worker's environment.

`WORKTRAIN_GIT_REMOTE` is a URL, or the name of a remote of the main repository whose
`remote.<name>.url` is read from its checked config at delivery (a session working in
that repository could have changed it: a URL pins it).
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from daemon.host.runtimedir import runtime_dir
from daemon.workspaces.git import PUSH_PROTOCOLS, GitError, git, safe_environment
from daemon.workspaces.repository import Repository

_URL_RE = re.compile(r"^([a-z][a-z0-9+.-]*://|[^/:]+@[^/:]+:|/)", re.IGNORECASE)
KEPT_FOR_PUSH = ("GIT_SSH_COMMAND", "GIT_SSH", "GIT_ASKPASS", "GIT_SSL_CAINFO", "GIT_SSL_CAPATH")


def is_url(remote: str) -> bool:
    """A URL (`scheme://`, scp-like `user@host:path`, or an absolute path), not a remote's name."""
    return bool(_URL_RE.match(remote))


def remote_url(repo: Repository, remote: str) -> str:
    """The URL to push to: `remote` itself, or the named remote's URL in `repo`'s config."""
    if is_url(remote):
        return remote
    try:
        listing = repo.run("config", "--local", "--null", "--get-all", f"remote.{remote}.url")
    except GitError:
        listing = ""
    urls = [url for url in listing.split("\0") if url]
    if not urls:
        raise GitError(f"the repository {repo.top} has no remote named {remote!r} (WORKTRAIN_GIT_REMOTE)")
    return urls[0]


def push_branch(repo: Repository, branch: str, remote: str, push_config: str | None, timeout: float) -> str:
    """Push `branch`'s commit to `remote` as `refs/heads/<branch>`; the URL pushed to."""
    url = remote_url(repo, remote)
    head = repo.run("rev-parse", "--verify", f"refs/heads/{branch}^{{commit}}")
    env = safe_environment(protocols=PUSH_PROTOCOLS, global_config=push_config, keep=KEPT_FOR_PUSH)
    with tempfile.TemporaryDirectory(prefix="push-", dir=runtime_dir()) as folder:
        shadow = Path(folder) / "push.git"
        git(Path(folder), "init", "-q", "--bare", "--template=", str(shadow))
        (shadow / "objects" / "info").mkdir(parents=True, exist_ok=True)
        (shadow / "objects" / "info" / "alternates").write_text(f"{repo.common_dir / 'objects'}\n")
        git(
            shadow,
            "push",
            "--quiet",
            "--no-verify",
            url,
            f"{head}:refs/heads/{branch}",
            env=env,
            timeout=timeout,
        )
    return url
