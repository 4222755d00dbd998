"""The launcher: the first thing run inside a command's namespaces, the last before its shell.

`python -I -S -c <bootstrap> PLAN -- /bin/bash -c COMMAND` (daemon/sandbox/namespaces.py
builds that line; `-I -S`: no environment variable, user site or current directory can put a
module of the workspace in front of ours). In order: bring the namespace's loopback up, set
the rlimits, build the Landlock ruleset, drop every capability and set `no_new_privs`,
enforce the ruleset, load the seccomp filter, then `execv` the shell — so the command
and everything it starts inherit all of it, and nothing of the launcher stays. Any layer
of the plan that fails stops here with exit code 125 and says which: the command never
runs less confined than planned.

Last before the `execv`, the attempt's lease (docs/durability.md): the worker passes, in
`NOT_AFTER_ENV`, the moment its local lease deadline falls (a reading of the fence's clock,
daemon/host/boottime.py). A worker frozen or starved between its fence check and
this spawn may have lost the session to another attempt meanwhile: past that moment the
command does not run (exit code `LAPSED`), and the worker asks Redis before it tries again.

It starts before every command, so it imports little: `ctypes` and its sibling layer
modules (caps, landlock, loopback, rlimits, seccomp), not `json`, `typing`, `dataclasses` or
`socket` (each pulls in `re`, `enum`, `inspect`; together they tripled its start). The plan
crosses the exec as lines `key value` (`encode` / `decode`), a list as repeated keys.
"""

from __future__ import annotations

import os
import sys

from daemon.host.boottime import boottime
from daemon.sandbox import caps, landlock, loopback, rlimits, seccomp

TYPE_CHECKING = False  # not `typing`'s: importing it costs the launcher's start (mypy knows the name)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TypeVar

    T = TypeVar("T")

REFUSED = 125
LAPSED = 123  # the lease's deadline passed before the command could start: it did not run
NOT_AFTER_ENV = "WORKTRAIN_NOT_AFTER"
# `@env` for the plan: its path is in this variable, not on the command line (a `--upload-pack`
# line is written to the main repository's reflog and shown by `ps`)
PLAN_PATH_ENV = "WORKTRAIN_SANDBOX_PLAN"
PLAN_FROM_ENV = "@env"
LAPSED_NOTE = "worktrain: this attempt's lease lapsed before the command started; it did not run\n"
Fields = dict[str, list[str]]
_LIMITS = ("memory_mb", "nproc", "fsize_mb", "cpu_seconds")


def encode(fields: Fields) -> str:
    """`{key: [values]}` as lines; ValueError for a value that cannot be one line."""
    lines = []
    for key, values in fields.items():
        for value in values:
            if "\n" in value or "\x00" in value:
                raise ValueError(f"{key} {value!r}: a newline or NUL cannot be carried to the sandbox")
            lines.append(f"{key} {value}")
    return "\n".join(lines)


def decode(text: str) -> Fields:
    fields: Fields = {}
    for line in text.split("\n"):
        key, _, value = line.partition(" ")
        if key:
            fields.setdefault(key, []).append(value)
    return fields


def _one(fields: Fields, key: str, default: str = "0") -> str:
    return fields.get(key, [default])[0]


def apply(fields: Fields) -> None:
    """Every layer of the plan on this process, or LayerFailed naming the one that failed."""
    if _one(fields, "loopback_up") == "1":
        _step("loopback", loopback.loopback_up)
    if "limit_memory_mb" in fields:
        limits = {name: int(_one(fields, f"limit_{name}")) for name in _LIMITS}
        _step("rlimits", lambda: rlimits.apply(limits))
    abi = int(_one(fields, "landlock_abi"))
    ruleset = _step("landlock", lambda: _ruleset(fields, abi)) if abi else None
    _step("capabilities", caps.drop_all if _one(fields, "drop_caps") == "1" else caps.set_no_new_privs)
    if ruleset is not None:
        _step("landlock", ruleset.restrict)
    if _one(fields, "seccomp") == "1":  # last: the filter refuses what the steps above call
        _step("seccomp", lambda: seccomp.install(unix_sockets=_one(fields, "unix_sockets", "1") == "1"))


def _ruleset(fields: Fields, abi: int) -> landlock.Ruleset:
    confine_tcp = _one(fields, "confine_tcp") == "1"
    ruleset = landlock.Ruleset(abi, network=confine_tcp)
    for key, access in (("read", landlock.READ), ("write", landlock.WRITE_ALL), ("devices", landlock.DEVICE)):
        for path in fields.get(key, []):
            _allow(ruleset, path, access)
    if confine_tcp:
        ruleset.allow_port(0, landlock.BIND_TCP)  # an ephemeral port, never a chosen one
        for port in fields.get("connect_ports", []):
            ruleset.allow_port(int(port), landlock.CONNECT_TCP)
    return ruleset


def _allow(ruleset: landlock.Ruleset, path: str, access: int) -> None:
    """A path gone since the plan was made (another session's repository, removed when it was
    delivered) grants nothing and stops nothing: what is not granted stays denied."""
    try:  # noqa: SIM105 (the launcher imports no contextlib: its start is every command's)
        ruleset.allow_path(path, access)
    except FileNotFoundError:
        pass


class LayerFailed(RuntimeError):
    pass


def _step(name: str, action: Callable[[], T]) -> T:
    try:
        return action()
    except (OSError, ValueError) as exc:
        raise LayerFailed(f"{name}: {exc}") from exc


def _plan_text(given: str) -> str:
    """The plan itself, or `@path`: the file the worker wrote it to (grants never grow the
    command line; daemon/sandbox/command.py), or `@env`: that path in `PLAN_PATH_ENV`. Read
    before any layer, capped."""
    if not given.startswith("@"):
        return given
    path = os.environ.pop(PLAN_PATH_ENV, "") if given == PLAN_FROM_ENV else given[1:]
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            return os.read(fd, 1 << 20).decode()
        finally:
            os.close(fd)
    except OSError as exc:
        raise LayerFailed(f"plan: {exc}") from exc


def main(argv: list[str]) -> None:
    if len(argv) < 3 or argv[1] != "--":
        sys.stderr.write("usage: launch PLAN -- PROGRAM [ARG...]\n")
        os._exit(2)
    try:
        apply(decode(_plan_text(argv[0])))
    except LayerFailed as exc:
        sys.stderr.write(f"worktrain: the sandbox could not apply {exc}; the command did not run\n")
        sys.stderr.flush()
        os._exit(REFUSED)
    if _lapsed(os.environ.pop(NOT_AFTER_ENV, "")):
        sys.stderr.write(LAPSED_NOTE)
        sys.stderr.flush()
        os._exit(LAPSED)
    os.execv(argv[2], argv[2:])  # without NOT_AFTER_ENV: popped above (os.environ unsets it)


def _lapsed(not_after: str) -> bool:
    """Whether the deadline the worker gave (none: no lease to keep) has passed."""
    if not not_after:
        return False
    try:
        return boottime() > float(not_after)
    except ValueError:
        return True  # unreadable: fail closed, like every layer here


def bootstrap_code(root: str) -> str:
    """The `-c` program that imports this module from WorkTrain's own tree and runs `main`."""
    return (
        f"import sys; sys.path.insert(0, {root!r}); "
        "from daemon.sandbox.launch import main; main(sys.argv[1:])"
    )
