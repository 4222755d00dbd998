"""Landlock (docs/security.md): the kernel's unprivileged access control, by its three system calls.

Why our own ctypes calls and not the `landlock` package from PyPI: that package (1.0.0.dev5,
a pre-release) speaks ABI 1-2 only — its ruleset attribute has `handled_access_fs` alone —
so it cannot express TRUNCATE (ABI 3), TCP port rules (ABI 4, which the `egress` network
mode is made of), device ioctls (ABI 5) or the signal and abstract-socket scopes (ABI 6).
It also decides failure by reading `errno` instead of the return value. What we need is
three system calls and three C structures (about a hundred lines here), used by one small
launcher that must import nothing but the standard library (daemon/sandbox/launch.py runs
before the command, inside its namespace). So: no dependency, every right this kernel's
ABI has, best effort below it (a right the ABI lacks is simply not handled).

Usage: `Ruleset(abi)` handles every right of `abi`; `allow_path(path, access)`,
`allow_port(port, access)`; `restrict()` (needs `no_new_privs` or CAP_SYS_ADMIN). Every
access not allowed is denied to this thread and everything it starts from then on.
"""

from __future__ import annotations

import ctypes
import errno
import os

# System call numbers: the same on every architecture (added after the table unification).
_SYS_CREATE_RULESET = 444
_SYS_ADD_RULE = 445
_SYS_RESTRICT_SELF = 446
_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH = 1
_RULE_NET_PORT = 2

# Filesystem rights (linux/landlock.h), with the ABI that introduced each.
EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13  # ABI 2
TRUNCATE = 1 << 14  # ABI 3
IOCTL_DEV = 1 << 15  # ABI 5
# Network rights (ABI 4) and scopes (ABI 6).
BIND_TCP = 1 << 0
CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0
SCOPE_SIGNAL = 1 << 1

_FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 5: (1 << 16) - 1}
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV  # the only rights a file rule takes
READ = EXECUTE | READ_FILE | READ_DIR
WRITE_ALL = (1 << 16) - 1  # everything (masked to what the ABI handles)
DEVICE = READ_FILE | WRITE_FILE | IOCTL_DEV | READ_DIR  # /dev/null and the like (and /dev/pts)


class LandlockError(OSError):
    """A Landlock call failed (the message says which, and why where it can)."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # __attribute__((packed)) in the kernel's header: 12 bytes
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPortAttr(ctypes.Structure):
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


_libc: ctypes.CDLL | None = None


def _syscall(number: int, *args: object) -> int:
    global _libc
    if _libc is None:  # once: a ruleset takes a hundred rules or more
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.syscall.restype = ctypes.c_long
    result = int(_libc.syscall(ctypes.c_long(number), *args))
    if result < 0:
        code = ctypes.get_errno()
        raise LandlockError(code, os.strerror(code))
    return result


def abi_version() -> tuple[int, str]:
    """This kernel's Landlock ABI (0 when there is none) and, when 0, why."""
    if os.uname().sysname != "Linux":
        return 0, f"Landlock is Linux only (this is {os.uname().sysname})"
    try:
        return _syscall(
            _SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION)
        ), ""
    except LandlockError as exc:
        why = {
            errno.ENOSYS: "this kernel has no Landlock (before 5.13, or built without it)",
            errno.EOPNOTSUPP: "Landlock is disabled at boot (add landlock to the kernel's lsm= list)",
        }.get(exc.errno or 0, f"Landlock unavailable: {exc.strerror}")
        return 0, why


def handled_fs(abi: int) -> int:
    return next((mask for level, mask in sorted(_FS_BY_ABI.items(), reverse=True) if abi >= level), 0)


class Ruleset:
    """A ruleset handling every right of `abi` (the network's from ABI 4 when `network`)."""

    def __init__(self, abi: int, network: bool = False) -> None:
        if abi < 1:
            raise LandlockError(errno.EOPNOTSUPP, "no Landlock on this kernel")
        self.abi = abi
        self.fs = handled_fs(abi)
        self.net = (BIND_TCP | CONNECT_TCP) if network and abi >= 4 else 0
        if network and not self.net:
            raise LandlockError(errno.EOPNOTSUPP, f"Landlock ABI {abi} has no network rules (4 needed)")
        scoped = (SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL) if abi >= 6 else 0
        attr = _RulesetAttr(self.fs, self.net, scoped)
        size = 24 if abi >= 6 else 16 if abi >= 4 else 8
        self.fd = _syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))

    def allow_path(self, path: str, access: int) -> None:
        """Allow `access` beneath `path` (a file takes file rights only: the rest is masked)."""
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        try:
            is_dir = (os.fstat(fd).st_mode & 0o170000) == 0o040000  # S_ISDIR, without `stat`
            allowed = access & self.fs & (~0 if is_dir else FILE_RIGHTS)
            if allowed:
                rule = _PathBeneathAttr(allowed, fd)
                _syscall(
                    _SYS_ADD_RULE,
                    self.fd,
                    ctypes.c_int(_RULE_PATH_BENEATH),
                    ctypes.byref(rule),
                    ctypes.c_uint32(0),
                )
        finally:
            os.close(fd)

    def allow_port(self, port: int, access: int) -> None:
        """Allow `access` (BIND_TCP, CONNECT_TCP) on TCP `port` (0: binding an ephemeral port)."""
        rule = _NetPortAttr(access & self.net, port)
        _syscall(_SYS_ADD_RULE, self.fd, ctypes.c_int(_RULE_NET_PORT), ctypes.byref(rule), ctypes.c_uint32(0))

    def restrict(self) -> None:
        """Enforce it on this thread (and everything it starts); the ruleset is then closed."""
        try:
            _syscall(_SYS_RESTRICT_SELF, self.fd, ctypes.c_uint32(0))
        finally:
            os.close(self.fd)
