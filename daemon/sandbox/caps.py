"""Every capability dropped and `no_new_privs` set (docs/security.md, finding A3), by prctl/capset.

As root a command used to keep every capability (`CapEff 000001fffeffffff`): it could
unmount the data dir's cover and its own `/proc` and read the host's. After `drop_all()`:
- the securebits are locked so that uid 0 never regains capabilities at an `execve` and a
  setuid change never keeps them (SECBIT_NOROOT, NO_SETUID_FIXUP, NO_CAP_AMBIENT_RAISE set and
  locked; KEEP_CAPS locked off);
- the bounding set is empty (nothing can ever come back, file capabilities included);
- the effective, permitted and inheritable sets are empty (capset), the ambient set cleared;
- `no_new_privs`: no setuid or file-capability gain at `execve` (and Landlock may be applied).
So a root command is a root uid with no privilege: no mount or umount, no ptrace of anything
it does not own, no raw sockets, no `/proc/<pid>/mem` of another process. Files root owns it
can still open by their mode bits — Landlock (daemon/sandbox/landlock.py) bounds those.

Standard library only (runs in the launcher, before the command).
"""

from __future__ import annotations

import ctypes
import os

PR_CAPBSET_DROP = 24
PR_SET_SECUREBITS = 28
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
# SECBIT_NOROOT, NO_SETUID_FIXUP, KEEP_CAPS, NO_CAP_AMBIENT_RAISE and their locks (securebits.h)
SECUREBITS_LOCKED_DOWN = 0x01 | 0x02 | 0x04 | 0x08 | 0x20 | 0x40 | 0x80  # KEEP_CAPS (0x10) off, locked
_LINUX_CAPABILITY_VERSION_3 = 0x20080522


class CapsError(OSError):
    pass


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


_loaded: list[ctypes.CDLL] = []


def _libc() -> ctypes.CDLL:
    if not _loaded:
        _loaded.append(ctypes.CDLL(None, use_errno=True))
    return _loaded[0]


def _prctl(option: int, arg: int = 0) -> None:
    libc = _libc()
    args = (ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))
    if libc.prctl(ctypes.c_int(option), *args) != 0:
        code = ctypes.get_errno()
        raise CapsError(code, f"prctl({option}, {arg}): {os.strerror(code)}")


def last_cap() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as handle:
            return int(handle.read())
    except (OSError, ValueError):
        return 63  # dropping a capability the kernel does not know is EINVAL, ignored below


def set_no_new_privs() -> None:
    _prctl(PR_SET_NO_NEW_PRIVS, 1)


def drop_all() -> None:
    """Drop every capability for good (the order matters: securebits and the bounding set
    need CAP_SETPCAP, which goes last with capset)."""
    if _has_setpcap():
        _prctl(PR_SET_SECUREBITS, SECUREBITS_LOCKED_DOWN)
        for cap in range(last_cap() + 1):
            try:
                _prctl(PR_CAPBSET_DROP, cap)
            except CapsError as exc:
                if exc.errno != 22:  # EINVAL: not a capability of this kernel
                    raise
    _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()  # all zero: nothing effective, permitted or inheritable
    if _libc().capset(ctypes.byref(header), ctypes.byref(data)) != 0:
        code = ctypes.get_errno()
        raise CapsError(code, f"capset: {os.strerror(code)}")
    set_no_new_privs()


def _has_setpcap() -> bool:
    """Whether CAP_SETPCAP (8) is effective (without it the bounding set cannot shrink; it
    is then empty already in any case that matters: an unprivileged process owns nothing)."""
    return bool(effective() & (1 << 8))


def effective() -> int:
    """This process's effective capability mask (CapEff of /proc/self/status)."""
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    return 0
