"""The seccomp layer (docs/security.md): system calls a command never needs, refused by the kernel.

Landlock bounds files and TCP ports, namespaces bound what a command sees, the capability
drop bounds root; what is left are kernel interfaces that none of them covers. This filter
refuses them with `EPERM` (a program sees "Operation not permitted" and can carry on):
- the kernel keyring (`add_key`, `request_key`, `keyctl`): keyrings are not namespaced, so
  the worker uid's keys were readable from the box (issue 29, item 7);
- debugging and other processes' memory (`ptrace`, `process_vm_readv/writev`, `kcmp`);
- `bpf`, `perf_event_open`, `userfaultfd`, `io_uring_*` (the usual ways into kernel bugs;
  io_uring would also open sockets without the `socket` call this filter looks at);
- mounts and namespaces (`mount`, `umount2`, the new mount API, `pivot_root`, `unshare`,
  `setns`, and `clone` with any `CLONE_NEW*` flag; `clone3` answers `ENOSYS`, so the C
  library falls back to `clone`, whose flags a filter can read — Docker's choice too);
- modules, kexec, reboot, swap, accounting, quotas, the clock, the kernel log,
  `open_by_handle_at` (the "shocker" escape), `TIOCSTI`/`TIOCLINUX` (typing into a terminal);
- `socket(AF_VSOCK, ...)` in every mode: vsock reaches the hypervisor's host and no
  network namespace separates it (issue 40, item 2; Docker refuses it too);
- in network mode `none` (`unix_sockets=False`), allow-lists rather than deny-lists:
  `socket` only of the families a namespace separates (AF_INET, AF_INET6, AF_NETLINK), so
  no AF_UNIX; `socketpair` only of `SOCK_STREAM` and `SOCK_SEQPACKET` (the type with its
  SOCK_NONBLOCK and SOCK_CLOEXEC bits masked off, as the kernel reads it). Landlock up to
  ABI 7 does not cover `connect()` to a pathname Unix socket, and a network namespace
  isolates only abstract ones, so without this a command reached every daemon's socket on
  the host (docker, ssh-agent, a secret in a 0700 folder: issue 29, item 4). A datagram
  pair can `sendto` or `connect` any pathname socket (`/dev/log`, journald's), and the
  kernel makes `SOCK_RAW` a datagram pair: refusing `SOCK_DGRAM` alone let it through
  (issue 40). A filter cannot read the path a `connect` names, so it refuses the socket
  itself; stream and seqpacket pairs stay (connected to each other for good: pipes between
  a command's own processes). A command that needs a Unix-socket server of its own uses
  TCP on its loopback instead (docs/security.md).
A call made through another ABI (32-bit `int 0x80`, x32) answers `ENOSYS`: the numbers
below are the native ones, and the filter must not be walked around through other numbers.

Docker's default profile is an allow-list of about 350 calls; this one is a deny-list of
what Docker refuses and matters here: a deny-list cannot break a toolchain that uses a call
Docker's list forgot, and every call it names is one no build or test needs.

A classic BPF program of our own (70 to 90 instructions, built by `program`) and not
libseccomp: the launcher imports the standard library only (it runs before every command),
the product installs from PyPI alone, and libseccomp is a system library. `x86_64` and
`aarch64` are known; elsewhere `supported()` says no and the layer is reported missing.
"""

from __future__ import annotations

import ctypes
import os
import struct

# linux/seccomp.h, linux/filter.h, linux/audit.h
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
EPERM = 1
ENOSYS = 38
_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JSET_K = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_AND_K = 0x54  # BPF_ALU | BPF_AND | BPF_K
_RET_K = 0x06  # BPF_RET | BPF_K
_NR, _ARCH = 0, 4  # offsets in struct seccomp_data; args[i] at 16 + 8 * i (low word first)

AF_UNIX, AF_INET, AF_INET6, AF_NETLINK, AF_VSOCK = 1, 2, 10, 16, 40
# network `none`: the socket families a network namespace separates (AF_NETLINK: `ip`, getifaddrs)
NAMESPACED_FAMILIES = (AF_INET, AF_INET6, AF_NETLINK)
SOCK_STREAM, SOCK_SEQPACKET = 1, 5
PAIR_TYPES = (SOCK_STREAM, SOCK_SEQPACKET)  # connected to each other for good: no sendto elsewhere
_SOCK_TYPE_MASK = 0xF  # the kernel's SOCK_TYPE_MASK: the rest are SOCK_NONBLOCK, SOCK_CLOEXEC
# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
CLONE_NEW_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
TERMINAL_INJECTION = (0x5412, 0x541C)  # TIOCSTI, TIOCLINUX

REFUSED = (
    "add_key", "request_key", "keyctl",
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp",
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "mount", "umount2", "pivot_root", "unshare", "setns",
    "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
    "reboot", "swapon", "swapoff", "acct", "quotactl", "quotactl_fd",
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "syslog",
    "open_by_handle_at", "name_to_handle_at", "lookup_dcookie", "nfsservctl", "vhangup",
    # x86_64 only (absent from the aarch64 table)
    "iopl", "ioperm", "create_module", "get_kernel_syms", "query_module", "uselib", "_sysctl",
    "ustat", "sysfs",
)  # fmt: skip

# The native numbers (asm/unistd_64.h; asm-generic/unistd.h for aarch64).
_X86_64 = {
    "add_key": 248, "request_key": 249, "keyctl": 250, "ptrace": 101, "process_vm_readv": 310,
    "process_vm_writev": 311, "kcmp": 312, "bpf": 321, "perf_event_open": 298, "userfaultfd": 323,
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "mount": 165,
    "umount2": 166, "pivot_root": 155, "unshare": 272, "setns": 308, "open_tree": 428,
    "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "mount_setattr": 442, "init_module": 175, "finit_module": 313, "delete_module": 176,
    "kexec_load": 246, "kexec_file_load": 320, "reboot": 169, "swapon": 167, "swapoff": 168,
    "acct": 163, "quotactl": 179, "quotactl_fd": 443, "settimeofday": 164, "clock_settime": 227,
    "clock_adjtime": 305, "adjtimex": 159, "syslog": 103, "open_by_handle_at": 304,
    "name_to_handle_at": 303, "lookup_dcookie": 212, "nfsservctl": 180, "vhangup": 153,
    "iopl": 172, "ioperm": 173, "create_module": 174, "get_kernel_syms": 177, "query_module": 178,
    "uselib": 134, "_sysctl": 156, "ustat": 136, "sysfs": 139,
    "clone": 56, "clone3": 435, "socket": 41, "socketpair": 53, "ioctl": 16,
}  # fmt: skip
_AARCH64 = {
    "add_key": 217, "request_key": 218, "keyctl": 219, "ptrace": 117, "process_vm_readv": 270,
    "process_vm_writev": 271, "kcmp": 272, "bpf": 280, "perf_event_open": 241, "userfaultfd": 282,
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "mount": 40,
    "umount2": 39, "pivot_root": 41, "unshare": 97, "setns": 268, "open_tree": 428,
    "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "mount_setattr": 442, "init_module": 105, "finit_module": 273, "delete_module": 106,
    "kexec_load": 104, "kexec_file_load": 294, "reboot": 142, "swapon": 224, "swapoff": 225,
    "acct": 89, "quotactl": 60, "quotactl_fd": 443, "settimeofday": 170, "clock_settime": 112,
    "clock_adjtime": 266, "adjtimex": 171, "syslog": 116, "open_by_handle_at": 265,
    "name_to_handle_at": 264, "lookup_dcookie": 18, "nfsservctl": 42, "vhangup": 58,
    "clone": 220, "clone3": 435, "socket": 198, "socketpair": 199, "ioctl": 29,
}  # fmt: skip
# machine -> (AUDIT_ARCH_*, the numbers, the first number of another ABI sharing the arch)
_ARCHES = {
    "x86_64": (0xC000003E, _X86_64, 0x40000000),  # x32 calls carry bit 30
    "aarch64": (0xC00000B7, _AARCH64, None),
}


class SeccompError(OSError):
    pass


def supported() -> tuple[bool, str]:
    """Whether this machine's architecture and kernel take the filter (and, if not, why)."""
    machine = os.uname().machine
    if machine not in _ARCHES:
        return False, f"no system call table for {machine} (x86_64 and aarch64 are known)"
    try:
        with open("/proc/self/status") as handle:
            if not any(line.startswith("Seccomp:") for line in handle):
                return False, "this kernel has no seccomp (CONFIG_SECCOMP)"
    except OSError as exc:
        return False, f"cannot read /proc/self/status: {exc.strerror}"
    return True, ""


def refused_here() -> list[str]:
    """The calls of REFUSED this machine has (what the layer reports)."""
    numbers = _ARCHES.get(os.uname().machine, (0, {}, None))[1]
    return [name for name in REFUSED if name in numbers]


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k & 0xFFFFFFFF)


def _arg(index: int) -> int:
    return 16 + 8 * index  # the low 32 bits on a little-endian machine (both arches here)


class _Program:
    """Instructions whose jumps name labels, resolved once every instruction is placed."""

    def __init__(self) -> None:
        self.code: list[tuple[int, str | int, str | int, int]] = []
        self.labels: dict[str, int] = {}

    def add(self, code: int, k: int = 0, jt: str | int = 0, jf: str | int = 0) -> None:
        self.code.append((code, jt, jf, k))

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def assemble(self) -> bytes:
        out = []
        for at, (code, jt, jf, k) in enumerate(self.code):
            offsets = [self.labels[j] - at - 1 if isinstance(j, str) else j for j in (jt, jf)]
            if any(not 0 <= off <= 255 for off in offsets):
                raise SeccompError(22, "a filter jump out of range")
            out.append(_insn(code, offsets[0], offsets[1], k))
        return b"".join(out)


def _only(p: _Program, allowed: tuple[int, ...]) -> None:
    """Allow when the accumulator is one of `allowed`, refuse anything else."""
    for value in allowed:
        p.add(_JEQ_K, value, "allow", 0)
    p.add(_RET_K, _RET_ERRNO | EPERM)


def program(machine: str, unix_sockets: bool) -> bytes:
    """The filter for `machine` as `struct sock_filter[]` bytes (`unix_sockets=False`, network
    mode `none`: only namespaced socket families and stream or seqpacket pairs)."""
    audit_arch, numbers, foreign_from = _ARCHES[machine]
    p = _Program()
    p.add(_LD_W_ABS, _ARCH)
    p.add(_JEQ_K, audit_arch, 0, "nosys")
    p.add(_LD_W_ABS, _NR)
    if foreign_from is not None:
        p.add(_JGE_K, foreign_from, "nosys", 0)
    for name in REFUSED:
        if name in numbers:
            p.add(_JEQ_K, numbers[name], "deny", 0)
    p.add(_JEQ_K, numbers["clone3"], "nosys", 0)
    p.add(_JEQ_K, numbers["clone"], "clone", 0)
    p.add(_JEQ_K, numbers["ioctl"], "ioctl", 0)
    p.add(_JEQ_K, numbers["socket"], "socket", 0)
    p.add(_JEQ_K, numbers["socketpair"], "socketpair" if not unix_sockets else "socket", 0)
    p.add(_RET_K, _RET_ALLOW)
    p.label("clone")
    p.add(_LD_W_ABS, _arg(0))
    p.add(_JSET_K, CLONE_NEW_FLAGS, "deny", "allow")
    p.label("ioctl")
    p.add(_LD_W_ABS, _arg(1))
    for request in TERMINAL_INJECTION:
        p.add(_JEQ_K, request, "deny", 0)
    p.add(_RET_K, _RET_ALLOW)
    p.label("socket")  # (and socketpair, but in `none`)
    p.add(_LD_W_ABS, _arg(0))  # the family: an int, the low word is all the kernel reads
    if unix_sockets:
        p.add(_JEQ_K, AF_VSOCK, "deny", "allow")
    else:
        _only(p, NAMESPACED_FAMILIES)
        p.label("socketpair")
        p.add(_LD_W_ABS, _arg(0))
        p.add(_JEQ_K, AF_UNIX, 0, "deny")  # no other family's module loaded by a pair either
        p.add(_LD_W_ABS, _arg(1))
        p.add(_AND_K, _SOCK_TYPE_MASK)
        _only(p, PAIR_TYPES)
    p.label("allow")
    p.add(_RET_K, _RET_ALLOW)
    p.label("deny")
    p.add(_RET_K, _RET_ERRNO | EPERM)
    p.label("nosys")
    p.add(_RET_K, _RET_ERRNO | ENOSYS)
    return p.assemble()


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install(unix_sockets: bool) -> None:
    """Load the filter on this thread, inherited by everything it `execve`s and forks
    (needs `no_new_privs`, set by caps first; SeccompError otherwise)."""
    ok, why = supported()
    if not ok:
        raise SeccompError(95, why)  # EOPNOTSUPP
    code = program(os.uname().machine, unix_sockets)
    buffer = ctypes.create_string_buffer(code, len(code))
    prog = _SockFprog(len(code) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    args = (ctypes.c_ulong(_SECCOMP_MODE_FILTER), ctypes.byref(prog), ctypes.c_ulong(0), ctypes.c_ulong(0))
    if libc.prctl(ctypes.c_int(_PR_SET_SECCOMP), *args) != 0:
        errno = ctypes.get_errno()
        raise SeccompError(errno, f"prctl(PR_SET_SECCOMP): {os.strerror(errno)}")
