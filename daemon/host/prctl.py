"""Linux prctl(2) through ctypes, for the process trees of `worktrain up` and the workers.

libc is loaded once and cached (`load_libc`), so code running between fork and exec (a
`preexec_fn`) only calls into an already loaded library.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import sys

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1  # the signal this process gets when its parent dies
PR_SET_DUMPABLE = 4  # 0: no core dumps, and same-user processes cannot read its /proc memory or environ
PR_SET_CHILD_SUBREAPER = 36  # orphaned descendants are re-parented to this process
PR_SET_NAME = 15  # the calling thread's comm name (/proc/PID/comm): what `top` and `ps -o comm` show
WEB_COMM = "worktrain web"  # what `top` shows for each process of `worktrain web`
COMM_LENGTH = 15  # the kernel keeps 15 bytes of a comm name (TASK_COMM_LEN 16, its NUL included)


@functools.cache
def load_libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    except OSError as exc:
        log.warning("libc could not be loaded for prctl: %s", exc)
        return None


def prctl(option: int, value: int) -> bool:
    """True when the call succeeded; False off Linux or when the kernel refused it."""
    libc = load_libc()
    return libc is not None and int(libc.prctl(option, value, 0, 0, 0)) == 0


def set_process_name(name: str) -> bool:
    """Name this process `name` in `top` and `ps -o comm` (the main thread's comm), cut to
    the kernel's 15 bytes; threads started afterwards inherit it. True when it took."""
    libc = load_libc()
    if libc is None:
        return False
    encoded = name.encode()[:COMM_LENGTH]
    return int(libc.prctl(PR_SET_NAME, ctypes.c_char_p(encoded), 0, 0, 0)) == 0
