"""The sandbox of docs/security.md attacked from the agent's own Bash tool (issue 21): real commands
through the real launcher, namespaces and Landlock of this host.

Each test names the layer it needs; where this host lacks it the test skips saying why
(CI runs on a kernel 6.x with Landlock ABI >= 4 and user namespaces, where none skips)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from daemon.sandbox import gitgrants, landlock, namespaces, policy, report
from daemon.sandbox.network import NetworkMode
from daemon.sandbox.policy import Limits, SandboxConfig
from daemon.tools import ToolContext
from daemon.tools.bash import run_command, scrub_env
from tests.agent.conftest import call_tool, make_worktree
from tests.tiers import fixture_tier

pytestmark = pytest.mark.processes

SECRET = "redis-pw-issue21-" + "9f3b" * 6
LAYERS = report.layers()
ABI = landlock.abi_version()[0]


def needs(layer: str, state_prefix: str = "") -> pytest.MarkDecorator:
    state = LAYERS.get(layer, "missing")
    return pytest.mark.skipif(
        state.startswith("missing") or not state.startswith(state_prefix),
        reason=f"this host's sandbox has {layer} {state!r}",
    )


needs_landlock = needs("landlock", "abi")
needs_netns = pytest.mark.skipif(
    not report.current().available.netns, reason=f"no network namespace here: {LAYERS.get('network')}"
)
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the finding is about a worker running as root")


class World:
    """A data dir with a secret, a home with a planted file, another session's workspace."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.data = tmp / "data"
        (self.data / "redis").mkdir(parents=True)
        (self.data / "redis" / "password").write_text(SECRET)
        (self.data / "up.json").write_text('{"apiUrl": "http://127.0.0.1:3456"}')
        self.home = tmp / "home"
        (self.home / ".ssh").mkdir(parents=True)
        (self.home / ".ssh" / "id_ed25519").write_text("PLANTED-HOME-KEY\n")
        self.other = tmp / "other-session"
        self.other.mkdir()
        (self.other / "notes.md").write_text("OTHER-SESSION-NOTES\n")
        self.workspace = tmp / "ws"
        self.workspace.mkdir(exist_ok=True)  # (workspace_ctx makes it)

    def config(self, **changes: object) -> SandboxConfig:
        # the planted home stands for the worker user's; the real one stays hidden too, as in a worker
        denied = (*policy.default_denied(self.data, (), home=self.home), Path(os.path.realpath(Path.home())))
        return replace(SandboxConfig(denied=denied), **changes)  # type: ignore[arg-type]


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    world = World(tmp_path)
    before, was = policy.current(), policy.configured()
    policy.configure(world.config())
    namespaces.configure(hidden=[world.data / "redis"])
    try:
        yield world
    finally:
        namespaces.configure(hidden=())
        policy.configure(before)
        policy._configured = was


@pytest.fixture
def ctx(workspace_ctx: ToolContext, world: World) -> ToolContext:
    workspace_ctx.workspace = world.workspace
    return workspace_ctx


def bash(ctx: ToolContext, command: str) -> str:
    out, _error = call_tool(ctx, "Bash", command=command, timeout_seconds=60)
    return out


# ---- filesystem (Landlock) --------------------------------------------------------------------


@needs_landlock
def test_reading_the_data_dir_the_home_and_another_session_fails(ctx: ToolContext, world: World) -> None:
    out = bash(
        ctx,
        f"cat {world.data}/redis/password {world.data}/up.json; ls {world.data};"
        f" cat {world.home}/.ssh/id_ed25519; cat {world.other}/notes.md; cat /etc/shadow; echo end",
    )
    assert "end" in out
    for leaked in (SECRET, "apiUrl", "PLANTED-HOME-KEY", "OTHER-SESSION-NOTES", "root:"):
        assert leaked not in out, out
    assert out.count("Permission denied") >= 5, out


@needs_landlock
def test_writing_outside_the_workspace_and_tmpdir_fails(ctx: ToolContext, world: World) -> None:
    out = bash(
        ctx,
        f"echo x > {world.tmp}/outside.txt; echo x > {world.other}/notes.md; echo x > {world.data}/up.json;"
        f" touch /etc/worktrain-test /usr/worktrain-test; mkdir {world.home}/new;"
        " echo mine > kept.txt && echo ok-workspace; echo t > $TMPDIR/t && cat $TMPDIR/t && echo ok-tmp;"
        " echo $TMPDIR",
    )
    assert "ok-workspace" in out and "ok-tmp" in out, out
    assert not (world.tmp / "outside.txt").exists()
    assert (world.other / "notes.md").read_text() == "OTHER-SESSION-NOTES\n"
    assert "apiUrl" in (world.data / "up.json").read_text()  # M1's up.json rewrite, from Bash
    assert not Path("/etc/worktrain-test").exists() and not Path("/usr/worktrain-test").exists()
    assert not (world.home / "new").exists()
    assert (world.workspace / "kept.txt").read_text() == "mine\n"
    tmpdir = Path(out.split("ok-tmp", 1)[1].split()[0])
    assert tmpdir.name.startswith("cmd-") and not tmpdir.exists()  # removed at the end


@needs_landlock
def test_a_read_only_workspace_is_read_not_written(world: World) -> None:
    (world.workspace / "src.py").write_text("print('hi')\n")
    result = run_command(
        "cat src.py; echo x > new.txt; rm src.py; echo t > $TMPDIR/t && echo tmp-ok",
        world.workspace,
        30,
        scrub_env(os.environ),
        read_only=[world.workspace],
    )
    assert "print('hi')" in result.output and "tmp-ok" in result.output, result.output
    assert not (world.workspace / "new.txt").exists() and (world.workspace / "src.py").exists()


@needs_landlock
def test_everyday_work_still_works(ctx: ToolContext) -> None:
    (ctx.workspace / "test_tiny.py").write_text("def test_one():\n    assert 1 + 1 == 2\n")
    out = bash(
        ctx,
        "git init -q . && git add test_tiny.py"
        " && git -c user.name=Agent -c user.email=agent@example.com commit -qm first && git log --oneline;"
        f" {sys.executable} -m pytest -q -p no:cacheprovider test_tiny.py 2>&1 | tail -1;"
        " python3 -m pip --version; pip --version;"
        " mkdir -p out/deep && echo data > out/deep/f && cat out/deep/f",
    )
    assert "first" in out, out  # the commit
    assert "1 passed" in out, out
    assert out.count("pip ") >= 2, out
    assert "data" in out and "[exit code 0]" in out, out


# ---- processes: capabilities, no_new_privs (A3) -----------------------------------------------


@needs_root
@needs("capabilities", "dropped")
def test_as_root_the_command_has_no_capability_and_cannot_undo_its_box(
    ctx: ToolContext, world: World
) -> None:
    """Finding A3: as root the command kept every capability; `umount` of the data dir's cover
    and of /proc gave the Redis password and the host's processes, and the memory of the
    worker (this test's process stands for it: `/proc/<its pid>/mem`)."""
    out = bash(
        ctx,
        "grep -E '^(CapEff|CapPrm|CapBnd|CapAmb|NoNewPrivs)' /proc/self/status;"
        f" umount {world.data}/redis 2>&1; umount -l /proc 2>&1; mount -t tmpfs x {world.tmp} 2>&1;"
        f" mount -t proc proc {world.workspace} 2>&1; cat {world.data}/redis/password;"
        f" head -c 16 /proc/{os.getpid()}/mem > /dev/null 2>&1 && echo MEM-READ;"
        # a fresh user and mount namespace of its own is refused (seccomp: issue 29); before
        # the filter it brought no power back either (CapEff 0 inside, checked then)
        " unshare -Um --propagation unchanged sh -c 'grep CapEff /proc/self/status;"
        f" umount {world.data}/redis; umount -l /proc; cat {world.data}/redis/password' 2>&1;"
        " id -u; echo end",
    )
    for line in ("CapEff:\t0000000000000000", "CapPrm:\t0000000000000000", "CapBnd:\t0000000000000000"):
        assert line in out, out
    assert "CapAmb:\t0000000000000000" in out and "NoNewPrivs:\t1" in out
    assert SECRET not in out and "MEM-READ" not in out, out
    assert out.count("CapEff:\t0000000000000000") == 1, out  # no nested user namespace at all:
    assert "unshare failed: Operation not permitted" in out, out
    assert "end" in out and out.split("end")[0].split()[-1] == "0"  # still uid 0, with no power
    assert not (world.workspace / "1").exists()  # no /proc mounted over the workspace


# ---- network ----------------------------------------------------------------------------------


@pytest.fixture
@fixture_tier("redis")
def host_listener() -> Iterator[tuple[int, list[bytes]]]:
    """A server on the host's loopback standing for the web tier / Redis / another session's
    server: the port, and what reached it."""
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen(16)
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
                reached.append(conn.recv(100))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], reached
    stop.set()
    thread.join()
    server.close()


PROBE = """
import os, socket, sys, threading
port = int(sys.argv[1])
def attempt(what, action):
    try:
        action(); print(what, "OK")
    except OSError as exc:
        print(what, "FAILED", exc.errno)
def reach():
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s: s.sendall(b"STOLEN")
attempt("connect-host-port", reach)
def steal():
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1); s.bind(("127.0.0.1", port))
attempt("bind-host-port", steal)
def local_server():
    srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen()
    threading.Thread(target=lambda: srv.accept()[0].sendall(b"pong"), daemon=True).start()
    with socket.create_connection(srv.getsockname(), timeout=2) as c: assert c.recv(4) == b"pong"
attempt("local-tcp-server", local_server)
def unix_server():
    path = os.path.join(os.environ["TMPDIR"], "s.sock")
    srv = socket.socket(socket.AF_UNIX); srv.bind(path); srv.listen()
    threading.Thread(target=lambda: srv.accept()[0].sendall(b"pong"), daemon=True).start()
    c = socket.socket(socket.AF_UNIX); c.connect(path); assert c.recv(4) == b"pong"
attempt("local-unix-server", unix_server)
"""


def network_probe(ctx: ToolContext, port: int) -> dict[str, str]:
    (ctx.workspace / "probe.py").write_text(PROBE)
    out = bash(ctx, f"python3 probe.py {port}")
    return {
        line.split()[0]: line.split(maxsplit=1)[1]
        for line in out.splitlines()
        if line.startswith(("connect", "bind", "local"))
    }


@needs_netns
def test_network_none_reaches_nothing_of_the_host_but_serves_its_own_loopback(
    ctx: ToolContext, world: World, host_listener: tuple[int, list[bytes]]
) -> None:
    port, reached = host_listener
    seen = network_probe(ctx, port)
    assert seen["connect-host-port"].startswith("FAILED"), seen  # refused: nothing listens in its namespace
    assert seen["local-tcp-server"] == "OK", seen
    # A Unix socket of its own too is refused (EPERM, seccomp): a filter cannot tell a
    # pathname inside the box from the host's (issue 29 item 4, docs/security.md)
    assert seen["local-unix-server"] == "FAILED 1", seen
    # Binding the host's port (H1's SO_REUSEPORT theft) binds only inside its own namespace:
    assert seen["bind-host-port"] == "OK", seen
    with socket.create_connection(("127.0.0.1", port), timeout=2) as client:
        client.sendall(b"host-client")  # ... and a host client still reaches the real server
    assert b"STOLEN" not in reached


@needs("landlock", "abi")
def test_network_egress_connects_only_to_allowed_ports_and_binds_only_ephemeral(
    ctx: ToolContext, world: World, host_listener: tuple[int, list[bytes]]
) -> None:
    if ABI < 4:
        pytest.skip(f"egress needs Landlock ABI 4 (this kernel: {ABI})")
    port, reached = host_listener
    allowed = socket.socket()
    allowed.bind(("127.0.0.1", 0))
    allowed.listen(4)
    try:
        policy.configure(world.config(network=NetworkMode.EGRESS, ports=(allowed.getsockname()[1],)))
        denied = network_probe(ctx, port)
        allowed_seen = network_probe(ctx, allowed.getsockname()[1])
    finally:
        allowed.close()
    assert denied["connect-host-port"] == "FAILED 13", denied  # EACCES: Landlock, not a refused port
    assert denied["bind-host-port"] == "FAILED 13", denied  # the web tier's port cannot be shared
    assert denied["local-unix-server"] == "OK", denied
    assert denied["local-tcp-server"] == "FAILED 13", denied  # said in docs/security.md: use `none`
    assert allowed_seen["connect-host-port"] == "OK", allowed_seen  # the allow-list decides
    assert reached == []


# ---- resources --------------------------------------------------------------------------------


def test_a_command_cannot_take_more_memory_than_its_limit(ctx: ToolContext, world: World) -> None:
    policy.configure(world.config(limits=Limits(memory_mb=256)))
    out = bash(ctx, "python3 -c 'b = bytearray(512 * 2**20)' 2>&1 | tail -1; ulimit -v; ulimit -c")
    assert "MemoryError" in out and str(256 * 1024) in out, out


@needs_landlock
def test_in_a_git_worktree_it_commits_on_its_branch_and_nothing_else(world: World) -> None:
    """README's Coding sessions under Landlock (v4): a session's repository of its own is writable, the main
    repository's git folder readable (its objects, through alternates), nothing of the main
    repository writable: not its checkout, not `main`, not its object store."""
    repo = world.tmp / "repo"
    git = ["git", "-c", "user.name=T", "-c", "user.email=t@example.com", "-C", str(repo)]
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    (repo / "README.md").write_text("main checkout\n")
    subprocess.run([*git, "add", "README.md"], check=True)
    subprocess.run([*git, "commit", "-qm", "first"], check=True)
    tree = make_worktree(repo, "s1", "worktrain/s1").path
    gitgrants.register(tree, gitgrants.grants_for(tree))
    main_before = subprocess.run([*git, "rev-parse", "main"], capture_output=True, text=True).stdout
    try:
        result = run_command(
            "echo work > work.txt && git add work.txt"
            " && git -c user.name=A -c user.email=a@example.com commit -qm work && echo COMMITTED;"
            " git log --format=%s | tr '\\n' ' '; echo;"
            f" echo overwritten > {repo}/README.md;"
            f" git rev-parse HEAD > {repo}/.git/refs/heads/main; touch {repo}/.git/objects/planted 2>&1",
            tree,
            30,
            scrub_env(os.environ),
        )
    finally:
        gitgrants.unregister(tree)
    assert "COMMITTED" in result.output and "work first" in result.output, result.output
    assert "Permission denied" in result.output, result.output
    assert (repo / "README.md").read_text() == "main checkout\n"
    assert subprocess.run([*git, "rev-parse", "main"], capture_output=True, text=True).stdout == main_before
    assert not (repo / ".git" / "objects" / "planted").exists()
