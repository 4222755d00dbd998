"""The seccomp filter's socket rules (issue 40, item 2), read by a small classic-BPF
interpreter: the decisions for each known machine and network mode, aarch64 included,
which the live tests (tests/agent/test_sandbox_channels.py, from the agent's own Bash)
can check only on the machine they run on."""

from __future__ import annotations

import struct

import pytest

from daemon.sandbox import seccomp

pytestmark = pytest.mark.unit


def run_filter(code: bytes, arch: int, nr: int, args: tuple[int, ...]) -> int:
    """What the classic BPF `code` returns for one call (the few instructions it uses)."""
    data = (
        struct.pack("=iI", nr, arch) + b"\0" * 8 + b"".join(struct.pack("=Q", a & (2**64 - 1)) for a in args)
    )
    data += b"\0" * (64 - len(data))
    insns = [struct.unpack("=HBBI", code[i : i + 8]) for i in range(0, len(code), 8)]
    at, acc = 0, 0
    while True:
        op, jt, jf, k = insns[at]
        at += 1
        if op == 0x20:  # ld [k]
            acc = struct.unpack_from("=I", data, k)[0]
        elif op == 0x54:  # and #k
            acc &= k
        elif op in (0x15, 0x35, 0x45):  # jeq, jge, jset
            hit = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[op]
            at += jt if hit else jf
        elif op == 0x06:
            return int(k)
        else:
            raise AssertionError(f"an instruction the test does not know: {op:#x}")


def test_the_socket_rules_for_each_known_machine_and_mode() -> None:
    """socket and socketpair, read as the kernel reads them: the type's flag bits masked,
    the family's low word; allow-lists in `none`, AF_VSOCK refused in every mode."""
    allow, eperm = 0x7FFF0000, 0x00050001
    nonblock, cloexec = 0o4000, 0o2000000
    for machine, (arch, numbers, _) in seccomp._ARCHES.items():
        for unix_sockets in (True, False):
            code = seccomp.program(machine, unix_sockets)

            def socket_(family: int, kind: int = 1) -> int:
                return run_filter(code, arch, numbers["socket"], (family, kind, 0))  # noqa: B023

            def pair(family: int, kind: int) -> int:
                return run_filter(code, arch, numbers["socketpair"], (family, kind, 0, 0))  # noqa: B023

            assert socket_(40) == eperm and pair(40, 1) == eperm, machine  # AF_VSOCK
            assert socket_(2) == socket_(10) == socket_(16) == allow, machine
            assert socket_(2 | 1 << 32) == allow  # the high word of an int argument is not read
            for kind in (1, 5, 1 | cloexec, 5 | nonblock | cloexec):  # stream, seqpacket
                assert pair(1, kind) == allow, (machine, kind)
            for kind in (2, 3, 2 | cloexec, 3 | nonblock, 2 | nonblock | cloexec, 4, 0, 15):
                assert pair(1, kind) == (allow if unix_sockets else eperm), (machine, kind)
            for family in (1, 17, 30, 38):  # unix, packet, tipc, alg
                assert socket_(family) == (allow if unix_sockets else eperm), (machine, family)
            assert pair(30, 1) == (allow if unix_sockets else eperm), machine  # a TIPC pair
