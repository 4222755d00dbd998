"""The worker's own git: one runner, with a configuration WorkTrain alone decides
(docs/security.md, "The worker's own git").

Every repository the worker's git touches may have been written by a session: a `none`
session's workspace can be a repository (or hold one), and it can write that repository's
`.git/config`, hooks and attributes. So no git command a WorkTrain process runs outside the
box reads a configuration a session chose, nor runs a program one named:
- no system or global config (`GIT_CONFIG_NOSYSTEM`, `GIT_CONFIG_GLOBAL=/dev/null`), no
  system attributes, no `GIT_*` variable of the worker's own environment;
- `GIT_ALLOW_PROTOCOL=file` (a push adds the network schemes): an environment variable
  overrides every `protocol.*.allow` and makes an `ext::` or `fd::` URL, however a
  `url.*.insteadOf` rewrote it, a refusal, never a program;
- on the command line, which wins over any file: hooks, fsmonitor, the alternate-refs
  command, credential helpers, automatic gc and maintenance off, the pager `cat`;
- and the repository's own config checked against an allowlist before git runs in it
  (daemon/workspaces/repository.py): keys outside it refuse the repository, named.
What git still reads from the repository — objects, refs, `HEAD`, attributes for a diff's
stat — is data; filters, text conversions and external diffs need config keys the
allowlist refuses (and `--no-textconv --no-ext-diff` where a diff runs).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

log = logging.getLogger(__name__)

GIT_TIMEOUT_SECONDS = 300.0
DEFAULT_AUTHOR = "WorkTrain <worktrain@localhost>"
_AUTHOR_RE = re.compile(r"^\s*(?P<name>[^<>]+?)\s*<(?P<email>[^<>\s]+)>\s*$")
# what runs a program, whatever a config file says: the settings every git of the delivery
# command gets too (as GIT_CONFIG_COUNT pairs)
NO_PROGRAMS = (
    ("core.hooksPath", "/dev/null"),
    ("core.fsmonitor", "false"),
    ("core.alternateRefsCommand", "true"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
)
SAFE_SETTINGS = (
    *NO_PROGRAMS,
    ("core.pager", "cat"),
    ("core.attributesFile", os.devnull),
    ("core.excludesFile", os.devnull),
    ("core.sshCommand", "ssh"),
    ("credential.helper", ""),
    ("fetch.writeCommitGraph", "false"),
    ("fetch.recurseSubmodules", "false"),
    ("submodule.recurse", "false"),
    ("protocol.allow", "never"),
    ("protocol.file.allow", "always"),
)
SAFE_CONFIG = tuple(arg for key, value in SAFE_SETTINGS for arg in ("-c", f"{key}={value}"))
LOCAL_PROTOCOLS = ("file",)
PUSH_PROTOCOLS = ("file", "git", "ssh", "http", "https")
# the worker's own environment may name a git dir, a config or an exec path: none of it applies
_DROPPED_PREFIX = "GIT_"
_KEPT_FOR_PUSH = ("GIT_SSH_COMMAND", "GIT_SSH", "GIT_ASKPASS", "GIT_SSL_CAINFO", "GIT_SSL_CAPATH")


class GitError(Exception):
    """A git command failed (or git is missing): the message says which and why."""


def git_binary() -> str:
    found = shutil.which("git")
    if found is None:
        raise GitError("git is not installed on this worker's host (worktree mode needs it)")
    return found


def safe_environment(
    base: Mapping[str, str] | None = None,
    *,
    protocols: Sequence[str] = LOCAL_PROTOCOLS,
    global_config: str | None = None,
    keep: Sequence[str] = (),
) -> dict[str, str]:
    """`base` (default: this process's environment) without its `GIT_*` variables (but those
    in `keep`), with WorkTrain's own git settings. `global_config`: the one config file
    besides the repository's that git reads (the operator's, for a push's credentials)."""
    source = os.environ if base is None else base
    env = {k: v for k, v in source.items() if not k.startswith(_DROPPED_PREFIX) or k in keep}
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=global_config or os.devnull,
        GIT_ATTR_NOSYSTEM="1",
        GIT_NO_REPLACE_OBJECTS="1",
        GIT_TERMINAL_PROMPT="0",
        GIT_ALLOW_PROTOCOL=":".join(protocols),
    )
    return env


def delivery_command_environment(base: Mapping[str, str]) -> dict[str, str]:
    """For WORKTRAIN_DELIVERY_COMMAND (operator code that may run git, e.g. `gh pr create`):
    the operator's own git configuration stays (its credentials), but every git it runs gets
    hooks, fsmonitor, the alternate-refs command and automatic gc off and no `ext::`/`fd::`
    transport, as command-line config (`GIT_CONFIG_COUNT`), which no config file overrides."""
    env = dict(base)
    env["GIT_CONFIG_COUNT"] = str(len(NO_PROGRAMS))
    for index, (key, value) in enumerate(NO_PROGRAMS):
        env[f"GIT_CONFIG_KEY_{index}"] = key
        env[f"GIT_CONFIG_VALUE_{index}"] = value
    env["GIT_ALLOW_PROTOCOL"] = ":".join(PUSH_PROTOCOLS)
    return env


def git(
    cwd: Path,
    *args: str,
    env: Mapping[str, str] | None = None,
    timeout: float = GIT_TIMEOUT_SECONDS,
    stdin: str | None = None,
) -> str:
    """`git args` in `cwd` with WorkTrain's configuration; its stdout (stripped). GitError on a
    non-zero exit. `env`: the whole environment (from `safe_environment`), default the
    worker's with local transports only. Callers in a repository a session could write go
    through daemon/workspaces/repository.py, which checks its config first."""
    argv = [git_binary(), *SAFE_CONFIG, *args]
    try:
        done = subprocess.run(
            argv,
            cwd=cwd,
            env=dict(env) if env is not None else safe_environment(),
            input=stdin,
            stdin=None if stdin is not None else subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        raise GitError(f"git {args[0]} took longer than {timeout:.0f}s") from None
    except OSError as exc:
        raise GitError(f"git {args[0]} could not run in {cwd}: {exc.strerror}") from None
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip()[-800:]
        raise GitError(f"git {' '.join(_command_words(args))} failed ({done.returncode}): {said}")
    return done.stdout.strip()


def _command_words(args: Sequence[str]) -> list[str]:
    """The subcommand and its next two words, past any `-c key=value` before it."""
    rest = list(args)
    while len(rest) >= 2 and rest[0] == "-c":
        rest = rest[2:]
    return rest[:3]


def ok(cwd: Path, *args: str) -> bool:
    """Whether `git args` succeeds (a yes/no question such as `rev-parse --verify`)."""
    try:
        git(cwd, *args)
    except GitError:
        return False
    return True


def author_env(author: str) -> dict[str, str]:
    """`Name <email>` as git's author and committer variables (a bad value: the default):
    what the commits WorkTrain makes in the box (delivery's, a snapshot's) are signed with."""
    match = _AUTHOR_RE.match(author) or _AUTHOR_RE.match(DEFAULT_AUTHOR)
    assert match is not None
    name, email = match["name"], match["email"]
    return {
        "GIT_AUTHOR_NAME": name,
        "GIT_AUTHOR_EMAIL": email,
        "GIT_COMMITTER_NAME": name,
        "GIT_COMMITTER_EMAIL": email,
    }
