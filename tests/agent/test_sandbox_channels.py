"""Issue 29, items 4, 5 and 7 and the seccomp layer: the channels out of the box that Landlock
does not cover, attacked from the agent's own Bash driven by the fake model (what the model
received is the ground truth). Each test plants a secret on the host side the way a host
daemon or another user's process would, then lets the agent's command go after it.

Written against the standard library and the Bash tool only, so the same file runs on the
code before the fix (where each of these tests failed; see the issue's report)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from daemon.fakemodel import ScriptedModel, ScriptExhausted, reply, tool
from daemon.sandbox import landlock, report
from daemon.tools import ToolContext
from tests.agent.conftest import Harness, call_tool
from tests.tiers import fixture_tier

pytestmark = pytest.mark.processes

LAYERS = report.layers()
needs_namespaces = pytest.mark.skipif(
    not LAYERS.get("pid_namespace", "missing").startswith("on"),
    reason=f"no namespaces here: {LAYERS.get('pid_namespace')}",
)
needs_netns = pytest.mark.skipif(
    not report.current().available.netns, reason=f"no network namespace here: {LAYERS.get('network')}"
)
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.shmat.restype = ctypes.c_void_p


def agent_bash(harness: Harness, command: str) -> str:
    """Run `command` as the agent's own Bash call in a real session; the tool result the model
    was sent next (the session then ends: the script has nothing more)."""
    harness.create()
    model = ScriptedModel([reply(tool("Bash", command=command, timeout_seconds=60))])
    with contextlib.suppress(ScriptExhausted):  # the script ends after the call: so does the session
        harness.run(model)
    assert len(model.requests) >= 2, "the Bash call's result never reached the model"
    results = [
        block.content  # type: ignore[union-attr]
        for block in model.requests[1].messages[-1].content
        if block.type == "tool_result"
    ]
    assert results, model.requests[1].messages[-1]
    return "\n".join(results)


# ---- item 4: pathname Unix sockets -----------------------------------------------------------


@pytest.fixture
@fixture_tier("redis")
def hidden_socket(tmp_path: Path) -> Iterator[tuple[Path, str, list[bytes]]]:
    """A host daemon's socket in a 0700 folder (docker's, ssh-agent's), answering a secret to
    whoever connects: the socket, the secret, and what clients sent it."""
    folder = tmp_path / "private"
    folder.mkdir(mode=0o700)
    path = folder / "daemon.sock"
    secret = "unix-socket-secret-" + secrets.token_hex(8)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(4)
    server.settimeout(0.2)
    reached: list[bytes] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.sendall(secret.encode())
                reached.append(b"connected")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield path, secret, reached
    stop.set()
    thread.join()
    server.close()


@needs_netns
def test_network_none_reaches_no_unix_socket_of_the_host(
    harness: Harness, hidden_socket: tuple[Path, str, list[bytes]]
) -> None:
    """The finding: Landlock does not cover connect() on a pathname socket, and a network
    namespace isolates abstract sockets only; the agent read the secret of a socket in a
    folder it could not even list."""
    path, secret, reached = hidden_socket
    out = agent_bash(
        harness,
        f"ls {path.parent} 2>&1; python3 -c '"
        "import socket, sys\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        f's.connect("{path}")\n'
        'print("GOT", s.recv(100).decode())\' 2>&1; echo end',
    )
    assert "end" in out, out
    assert secret not in out and reached == [], out
    assert "Operation not permitted" in out, out  # the filter's EPERM, said to the agent


# ---- issue 40, item 2: a datagram socketpair, and vsock ------------------------------------


@pytest.fixture
def host_datagram_socket(tmp_path: Path) -> Iterator[tuple[Path, socket.socket]]:
    """A host daemon's datagram socket in a 0700 folder (`/dev/log`, journald's, systemd's
    notify socket): its path, and the socket, to read what reached it."""
    folder = tmp_path / "private-dgram"
    folder.mkdir(mode=0o700)
    path = folder / "log.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind(str(path))
    server.setblocking(False)
    try:
        yield path, server
    finally:
        server.close()


def drained(server: socket.socket) -> list[bytes]:
    got = []
    with contextlib.suppress(BlockingIOError):
        while True:
            got.append(server.recv(4096))
    return got


SOCKETPAIRS = """
import socket, sys
path = sys.argv[1]
kinds = {
    "raw": socket.SOCK_RAW,  # the kernel makes it SOCK_DGRAM
    "raw_nonblock": socket.SOCK_RAW | socket.SOCK_NONBLOCK,
    "dgram": socket.SOCK_DGRAM,
    "dgram_cloexec": socket.SOCK_DGRAM | socket.SOCK_CLOEXEC,
    "dgram_both": socket.SOCK_DGRAM | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK,
    "stream": socket.SOCK_STREAM,
    "stream_cloexec": socket.SOCK_STREAM | socket.SOCK_CLOEXEC,
    "seqpacket": socket.SOCK_SEQPACKET,
}
for name, kind in kinds.items():
    try:
        a, b = socket.socketpair(socket.AF_UNIX, kind)
    except OSError as exc:
        print(name, "refused", exc.errno); continue
    a.setblocking(True); b.setblocking(True)
    a.send(b"ping"); works = b.recv(4) == b"ping"
    for how in ("sendto", "connect"):
        try:
            if how == "sendto":
                a.sendto(("sendto-" + name).encode(), path)
            else:
                a.connect(path); a.send(("connect-" + name).encode())
            print(name, "sent", how)  # a seqpacket pair sends to its peer whatever the address
        except OSError:
            pass
    print(name, "pair", "works" if works else "broken")
try:
    socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM).close()
    print("vsock made 0")
except OSError as exc:
    print("vsock refused", exc.errno)
"""
DATAGRAM_PAIRS = ("raw", "raw_nonblock", "dgram", "dgram_cloexec", "dgram_both")
STREAM_PAIRS = ("stream", "stream_cloexec", "seqpacket")


@needs_netns
def test_no_datagram_socketpair_reaches_a_host_socket_and_vsock_is_refused(
    harness: Harness, host_datagram_socket: tuple[Path, socket.socket]
) -> None:
    """The finding: `socketpair(AF_UNIX, SOCK_RAW)` passed the filter (it refused only
    `SOCK_DGRAM`), the kernel made it a datagram pair, and `sendto` put a datagram in a host
    socket in a 0700 folder. And `AF_VSOCK`, which no network namespace separates, was open."""
    path, server = host_datagram_socket
    (harness.workspace / "pairs.py").write_text(SOCKETPAIRS)
    out = agent_bash(harness, f"python3 pairs.py {path} 2>&1; echo end")
    assert "end" in out, out
    seen = {tuple(line.split()[:2]): line.split()[2:] for line in out.splitlines() if len(line.split()) == 3}
    assert drained(server) == [], out  # the ground truth: nothing reached the host's socket
    for name in DATAGRAM_PAIRS:
        assert seen.get((name, "refused")) == [str(EPERM)], (name, out)
    for name in STREAM_PAIRS:  # what programs use (multiprocessing, asyncio) keeps working
        assert seen.get((name, "pair")) == ["works"], (name, out)
    assert seen.get(("vsock", "refused")) == [str(EPERM)], out


# ---- item 5: System V IPC of the host -------------------------------------------------------


@pytest.fixture
def host_segment() -> Iterator[tuple[int, str]]:
    """A 0600 System V shared-memory segment of the host holding a secret: (its id, the secret)."""
    secret = "sysv-shm-secret-" + secrets.token_hex(8)
    shmid = _libc.shmget(0, 4096, 0o1000 | 0o600)  # IPC_PRIVATE, IPC_CREAT | 0600
    assert shmid >= 0, os.strerror(ctypes.get_errno())
    address = _libc.shmat(shmid, None, 0)
    ctypes.memmove(address, secret.encode(), len(secret))
    try:
        yield shmid, secret
    finally:
        _libc.shmdt(ctypes.c_void_p(address))
        _libc.shmctl(shmid, 0, None)  # IPC_RMID


@needs_namespaces
def test_the_box_sees_no_system_v_segment_of_the_host(
    harness: Harness, host_segment: tuple[int, str]
) -> None:
    """The finding: the agent listed, read and overwrote a root-owned 0600 segment of the host."""
    shmid, secret = host_segment
    out = agent_bash(
        harness,
        "ipcs -m 2>&1; python3 -c '"
        "import ctypes\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "libc.shmat.restype = ctypes.c_void_p\n"
        f"at = libc.shmat({shmid}, None, 0)\n"
        'if at in (None, 2**64 - 1): print("ATTACH-FAILED", ctypes.get_errno())\n'
        'else: print("READ", ctypes.string_at(at, 40)); ctypes.memmove(at, b"OVERWRITTEN", 11)\' 2>&1;'
        " echo end",
    )
    assert "end" in out, out
    assert secret not in out and "ATTACH-FAILED" in out, out
    assert f" {shmid} " not in out, out  # not in ipcs' list either
    address = _libc.shmat(shmid, None, 0)
    try:
        assert ctypes.string_at(address, len(secret)).decode() == secret  # untouched
    finally:
        _libc.shmdt(ctypes.c_void_p(address))


# ---- item 7: the kernel keyring of the worker's uid ------------------------------------------


KEY_SPEC_USER_KEYRING = -4
SYS_ADD_KEY, SYS_KEYCTL = 248, 250  # x86_64
KEYCTL_UNLINK = 9


@pytest.fixture
def uid_key() -> Iterator[tuple[str, str]]:
    """A key in this uid's user keyring (@u), where a login's tools keep their secrets."""
    if os.uname().machine != "x86_64":
        pytest.skip("the test plants its key with x86_64 system call numbers")
    name = "worktrain-test-" + secrets.token_hex(4)
    secret = "keyring-secret-" + secrets.token_hex(8)
    key = _libc.syscall(
        SYS_ADD_KEY, b"user", name.encode(), secret.encode(), ctypes.c_size_t(len(secret)),
        ctypes.c_int(KEY_SPEC_USER_KEYRING),
    )  # fmt: skip
    if key < 0:
        pytest.skip(f"no keyring here: {os.strerror(ctypes.get_errno())}")
    try:
        yield name, secret
    finally:
        _libc.syscall(
            SYS_KEYCTL, ctypes.c_int(KEYCTL_UNLINK), ctypes.c_int(key), ctypes.c_int(KEY_SPEC_USER_KEYRING)
        )


READ_KEY = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
key = libc.syscall(250, ctypes.c_int(10), ctypes.c_int(-4), b"user", sys.argv[1].encode(), ctypes.c_int(0))
if key < 0:
    print("SEARCH-FAILED", os.strerror(ctypes.get_errno())); sys.exit()
buf = ctypes.create_string_buffer(200)
n = libc.syscall(250, ctypes.c_int(11), ctypes.c_int(key), buf, ctypes.c_size_t(200))
print("READ", buf.raw[:max(n, 0)].decode(), os.strerror(ctypes.get_errno()) if n < 0 else "")
"""


def test_the_box_cannot_read_the_keyring_of_the_worker_uid(
    harness: Harness, uid_key: tuple[str, str]
) -> None:
    """The finding: keyrings are not namespaced, so the agent read the uid's keys."""
    name, secret = uid_key
    (harness.workspace / "readkey.py").write_text(READ_KEY)
    out = agent_bash(harness, f"python3 readkey.py {name} 2>&1; echo end")
    assert "end" in out, out
    assert secret not in out and "SEARCH-FAILED Operation not permitted" in out, out


@needs_namespaces
def test_the_box_lists_no_key_of_the_worker_uid_in_proc(harness: Harness, uid_key: tuple[str, str]) -> None:
    """Issue 40, item 5: with the keyring calls refused, `/proc/keys` still listed the uid's
    keys (serial, type, name, size) and `/proc/key-users` its quota line."""
    name, _ = uid_key
    listed = Path("/proc/keys").read_text()
    assert name in listed  # the host sees it: the key is there to be hidden
    out = agent_bash(
        harness,
        "echo keys=$(wc -c < /proc/keys) users=$(wc -c < /proc/key-users);"
        " cat /proc/keys /proc/key-users 2>&1; echo end",
    )
    assert "end" in out, out
    assert name not in out and "_uid" not in out and "keyring" not in out, out
    assert "keys=0 users=0" in out, out
    assert f"{os.getuid()}:" not in out.replace("keys=0 users=0", ""), out  # key-users' line


# ---- the seccomp layer: every call it must refuse --------------------------------------------

CALLS = """
import ctypes, os, socket
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def call(name, number, *args):
    result = libc.syscall(ctypes.c_long(number), *[ctypes.c_long(a) for a in args])
    print(name, "errno" if result < 0 else "ok", ctypes.get_errno() if result < 0 else result)
call("add_key", 248, 0, 0, 0, 0, -2)
call("request_key", 249, 0, 0, 0, 0)
call("keyctl", 250, 0, -4, 0)  # KEYCTL_GET_KEYRING_ID of @u
call("ptrace", 101, 0)  # PTRACE_TRACEME
call("bpf", 321, 0, 0, 0)
call("perf_event_open", 298, 0, 0, -1, -1, 0)
call("userfaultfd", 323, 0)
call("io_uring_setup", 425, 1, 0)
call("mount", 165, 0, 0, 0, 0, 0)
call("umount2", 166, 0, 0)
call("pivot_root", 155, 0, 0)
call("unshare", 272, 0)  # flags 0: a no-op the kernel allows
call("setns", 308, -1, 0)
call("fsopen", 430, 0, 0)
call("init_module", 175, 0, 0, 0)
call("finit_module", 313, -1, 0, 0)
call("delete_module", 176, 0, 0)
call("kexec_load", 246, 0, 0, 0, 0)
call("kexec_file_load", 320, -1, -1, 0, 0, 0)
call("open_by_handle_at", 304, -1, 0, 0)
call("clone3", 435, 0, 0)
# CLONE_NEWUSER | CLONE_FS: a pair the kernel rejects (EINVAL) after the filter has looked,
# so no half-made child runs on if the call gets through
call("clone_newuser", 56, 0x10000000 | 0x200 | 17, 0, 0, 0, 0)
call("socketpair_dgram", 53, 1, 2, 0, 0)  # AF_UNIX, SOCK_DGRAM: sendto reaches any pathname socket
def attempt(name, action):
    try:
        action(); print(name, "ok", 0)
    except OSError as exc:
        print(name, "errno", exc.errno)
attempt("socket_unix", lambda: socket.socket(socket.AF_UNIX).close())
attempt("socketpair_stream", lambda: [s.close() for s in socket.socketpair()])
pid = os.fork()
if pid == 0:
    os._exit(7)
print("fork ok", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""
EPERM, ENOSYS = 1, 38
REFUSED = {
    name: EPERM
    for name in [
        *("add_key", "request_key", "keyctl", "ptrace", "bpf", "perf_event_open", "userfaultfd"),
        *("io_uring_setup", "mount", "umount2", "pivot_root", "unshare", "setns", "fsopen"),
        *("init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load"),
        *("open_by_handle_at", "clone_newuser", "socketpair_dgram", "socket_unix"),
    ]
} | {"clone3": ENOSYS}


def test_the_seccomp_filter_refuses_each_call_and_lets_work_go_on(harness: Harness) -> None:
    if os.uname().machine != "x86_64":
        pytest.skip("the probe script calls x86_64 system call numbers")
    (harness.workspace / "calls.py").write_text(CALLS)
    out = agent_bash(
        harness, "grep Seccomp: /proc/self/status; python3 calls.py 2>&1; unshare -U true 2>&1; echo end"
    )
    seen = {line.split()[0]: line.split()[1:] for line in out.splitlines() if len(line.split()) == 3}
    wrong = {name: seen.get(name) for name, code in REFUSED.items() if seen.get(name) != ["errno", str(code)]}
    assert not wrong, out
    assert seen["socketpair_stream"] == ["ok", "0"] and seen["fork"] == ["ok", "7"], out
    assert "Seccomp:\t2" in out, out
    assert "unshare failed: Operation not permitted" in out, out


# ---- item 9: without Landlock, the whole data dir is covered ---------------------------------


@needs_namespaces
def test_without_landlock_nothing_of_the_data_dir_is_in_reach(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The finding: where Landlock was off, the tmpfs cover hid a list of known names and
    missed `api-token`, `up.json` and `signals/`. The worker's own list (worker/pool.py) is
    what is configured here, as `worktrain worker` does at start."""
    from daemon.host.config import Settings
    from daemon.sandbox import namespaces, policy
    from worker.pool import private_paths

    data = harness.data_dir
    (data / "signals").mkdir(parents=True, exist_ok=True)
    (data / "api-token").write_text("api-token-secret-" + "ab12" * 8)
    (data / "up.json").write_text('{"apiUrl": "http://127.0.0.1:3456", "secret": "up-json-secret"}')
    (data / "signals" / "s1.jsonl").write_text('{"summary": "signal-secret"}\n')
    shm = Path("/dev/shm") / f"worktrain-test-{secrets.token_hex(4)}"  # a host's POSIX shm object
    shm.write_text("posix-shm-secret")
    monkeypatch.setenv("WORKTRAIN_FAULTS", "1")
    monkeypatch.setenv("WORKTRAIN_SANDBOX_FAULT", "no-landlock")
    before, was = policy.current(), policy.configured()
    settings = Settings(_env_file=None, data_dir=data)  # type: ignore[call-arg]
    try:
        probe = report.setup(settings)
        assert probe.layers["landlock"].startswith("missing"), probe.layers
        namespaces.configure(hidden=private_paths(settings))
        command = f"cat {data}/api-token {data}/up.json {data}/signals/* {shm}; ls -A {data}; echo end"
        out = agent_bash(harness, command)
    finally:
        shm.unlink()
        namespaces.configure(hidden=())
        report._probed = None
        policy.configure(before)
        policy._configured = was
    assert "end" in out, out
    for leaked in ("api-token-secret", "up-json-secret", "signal-secret", "api-token\n", "posix-shm-secret"):
        assert leaked not in out, out


# ---- the filter itself -----------------------------------------------------------------------


def test_the_filter_assembles_for_each_known_machine() -> None:
    import struct

    from daemon.sandbox import seccomp

    for machine in ("x86_64", "aarch64"):
        for unix_sockets in (True, False):
            code = seccomp.program(machine, unix_sockets)
            assert len(code) % 8 == 0 and len(code) // 8 < 256, machine
            first = struct.unpack("=HBBI", code[:8])
            assert first == (0x20, 0, 0, 4), first  # it starts by loading the architecture
            returns = {struct.unpack("=HBBI", code[i : i + 8])[3] for i in range(0, len(code), 8)}
            assert {0x7FFF0000, 0x00050001, 0x00050026} <= returns  # allow, EPERM, ENOSYS


def test_under_egress_unix_sockets_stay_and_the_rest_is_refused(
    workspace_ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dataclasses import replace

    from daemon.sandbox import policy
    from daemon.sandbox.network import NetworkMode

    if not LAYERS.get("landlock", "").startswith("abi") or landlock.abi_version()[0] < 4:
        pytest.skip("egress needs Landlock ABI 4")
    before, was = policy.current(), policy.configured()
    policy.configure(replace(before, network=NetworkMode.EGRESS))
    try:
        out, _ = call_tool(
            workspace_ctx,
            "Bash",
            command="python3 -c 'import socket; socket.socket(socket.AF_UNIX).close(); print(\"UNIX-OK\")';"
            " unshare -U true 2>&1; grep Seccomp: /proc/self/status;"
            " python3 -c 'import socket; socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)' 2>&1 | tail -1",
        )
    finally:
        policy.configure(before)
        policy._configured = was
    assert "UNIX-OK" in out and "Operation not permitted" in out and "Seccomp:\t2" in out, out
    assert "PermissionError: [Errno 1] Operation not permitted" in out, out  # vsock: in every mode
