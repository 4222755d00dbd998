"""Which keys of a repository's own config the worker's git accepts (docs/security.md, "The
worker's own git").

A repository a session could write (a `none` session's workspace is one, and so is any
repository below it) can hold, in its `.git/config`, keys that make git run a program or
read another file: `url.*.insteadOf` with `protocol.ext.allow`, `core.fsmonitor`,
`filter.*`, `credential.helper`, `include.path`, `core.sshCommand`, `http.cookieFile`, ...
The worker's git neutralises the ones it knows on its own command line and environment
(daemon/workspaces/git.py); this allowlist is the second lock: a repository whose local
config holds any other key is refused, with the keys named, before the worker's git runs
in it. Pure: it judges `git config --list` output, it reads no file.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# keys git writes itself for an ordinary repository, and that make git run nothing
CORE_KEYS = frozenset(
    {
        "core.repositoryformatversion",
        "core.filemode",
        "core.bare",
        "core.logallrefupdates",
        "core.ignorecase",
        "core.precomposeunicode",
        "core.symlinks",
        "core.autocrlf",
        "core.eol",
    }
)
# `section.<subsection>.key` patterns (section and key lower-case, as `git config --list` prints)
ALLOWED_PATTERNS = (
    re.compile(r"remote\..+\.(url|fetch)"),  # read as data: a push goes to a URL WorkTrain resolves
    re.compile(r"branch\..+"),  # tracking information: branch.<name>.remote/merge/rebase/...
    re.compile(r"user\.[^.]+"),  # an identity, for commits made in the box
    re.compile(r"extensions\.[^.]+"),  # format extensions git must know to read the repository
    re.compile(r"submodule\..+\.(url|active)"),  # the worker never runs a submodule command
)
ALLOWLIST_TEXT = (
    "core format keys (core.repositoryformatversion, filemode, bare, logallrefupdates, ignorecase, "
    "precomposeunicode, symlinks, autocrlf, eol), remote.*.url, remote.*.fetch, branch.*, user.*, "
    "extensions.*, submodule.*.url, submodule.*.active"
)


def parse_listing(listing: str) -> list[tuple[str, str]]:
    """`git config --list --null` output as (key, value) pairs, in file order."""
    entries = []
    for item in listing.split("\0"):
        if item:
            key, _, value = item.partition("\n")
            entries.append((key, value))
    return entries


def allowed(key: str) -> bool:
    name = key.lower() if key.count(".") < 2 else key
    return name in CORE_KEYS or any(pattern.fullmatch(name) for pattern in ALLOWED_PATTERNS)


def refused_keys(entries: Iterable[tuple[str, str]]) -> list[str]:
    """The keys outside the allowlist, each once, in the order met."""
    refused: list[str] = []
    for key, _value in entries:
        if not allowed(key) and key not in refused:
            refused.append(key)
    return refused


def worktree_config_enabled(entries: Iterable[tuple[str, str]]) -> bool:
    """`extensions.worktreeConfig`: git then also reads the git dir's `config.worktree`."""
    return any(
        key.lower() == "extensions.worktreeconfig" and value.strip().lower() in ("true", "yes", "on", "1", "")
        for key, value in entries
    )
