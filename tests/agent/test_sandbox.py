"""The Bash tool's sandbox (README's Coding sessions, issue 10 findings 2 and 7): each command in a PID
namespace of its own, nothing it started outliving it, the data dir's secrets covered; and
the process-group fallback where namespaces are unavailable, which says what it cannot do.

These run real commands through `unshare` (as root here; the `user` mode as `nobody`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from daemon.sandbox import namespaces
from daemon.sandbox.namespaces import Isolation
from daemon.tools import ToolContext
from daemon.tools.bash import run_command
from tests.agent.conftest import call_tool
from tests.agent.procscan import processes_with, wait_gone

ROOT = Path(__file__).resolve().parents[2]
SID = "sess_01JD0000000000000000000000"
SECRET = "sk-ant-issue10-" + "s3cr3t" * 4

pytestmark = [
    pytest.mark.processes,
    pytest.mark.skipif(
        namespaces.isolation()[0] is Isolation.GROUP,
        reason=f"no PID namespaces here: {namespaces.isolation()[1]}",
    ),
]


@pytest.fixture
def ctx(workspace_ctx: ToolContext) -> ToolContext:
    return workspace_ctx


def bash(ctx: ToolContext, command: str, timeout: int | None = None) -> tuple[str, bool]:
    args: dict[str, Any] = {"command": command}
    if timeout:
        args["timeout_seconds"] = timeout
    return call_tool(ctx, "Bash", **args)


def unique_marker() -> str:
    """A `sleep` argument no other process has: 8xxx.yyyyy seconds."""
    return f"{8000 + os.getpid() % 1000}.{time.monotonic_ns() % 100000:05d}"


def run_tool_in_child(command: str, workspace: Path, extra_env: dict[str, str], user: list[str] = ()) -> str:  # type: ignore[assignment]
    """A command run the way the Bash tool runs it, by a fresh Python process whose *initial*
    environment holds `extra_env` (as a worker's did: /proc/<pid>/environ shows the
    environment a process started with, whatever it removed from os.environ since)."""
    script = textwrap.dedent(
        """
        import os, sys
        from pathlib import Path
        from daemon.tools.bash import run_command, scrub_env
        print(run_command(sys.argv[1], Path.cwd(), 30, scrub_env(os.environ)).output)
        """
    )
    env = {**os.environ, **extra_env, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [*user, sys.executable, "-c", script, command],
        env=env,
        cwd=workspace,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_command_cannot_read_its_parents_environment(tmp_path: Path) -> None:
    # The finding: `tr '\0' '\n' < /proc/$PPID/environ` printed the worker's API key.
    workspace = tmp_path / "ws"
    workspace.mkdir()
    out = run_tool_in_child(
        "echo ppid=$PPID; tr '\\0' '\\n' < /proc/$PPID/environ; cat /proc/*/environ | tr '\\0' '\\n'",
        workspace,
        {"ANTHROPIC_API_KEY": SECRET, "WORKTRAIN_API_TOKEN": SECRET},
    )
    assert SECRET not in out
    assert "ppid=0" in out  # its parent is outside its namespace: not even a number it can use


def test_a_command_sees_only_its_own_processes(ctx: ToolContext) -> None:
    out, error = bash(
        ctx, f"echo self=$$; ls /proc | grep -cE '^[0-9]+$'; kill -0 {os.getpid()} && echo reached"
    )
    assert not error and "self=1" in out, out
    count = int(out.split("self=1", 1)[1].split()[0])
    assert count <= 4, out  # bash, ls, grep (and a subshell)
    assert "reached" not in out  # this test's own pid is not in its namespace


def test_a_setsid_child_does_not_outlive_its_command(ctx: ToolContext) -> None:
    marker = unique_marker()
    out, error = bash(ctx, f"setsid sleep {marker} > /dev/null 2>&1 & echo started")
    assert not error and "started" in out and "[exit code 0]" in out
    assert wait_gone(marker) == []


def test_a_nohup_and_setsid_children_die_with_a_timed_out_command(ctx: ToolContext) -> None:
    marker = unique_marker()
    command = (
        f"nohup sleep {marker} > /dev/null 2>&1 & setsid sleep {marker} > /dev/null 2>&1 & sleep {marker}"
    )
    started = time.monotonic()
    out, error = bash(ctx, command, timeout=1)
    assert error and "timed out after 1s: the command and everything it started were killed" in out
    assert time.monotonic() - started < 10
    assert wait_gone(marker) == []


def test_the_data_dirs_private_folders_are_empty_to_a_command(ctx: ToolContext, tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "redis").mkdir(parents=True)
    (data / "redis" / "password").write_text(SECRET)
    inside = data / "issues" / "ws"  # a workspace inside a private folder keeps that folder
    inside.mkdir(parents=True)
    (inside / "notes.txt").write_text("mine\n")
    namespaces.configure(hidden=[data / "redis", data / "issues"])
    try:
        out, error = bash(ctx, f"ls -A {data / 'redis'}; cat {data / 'redis' / 'password'}; echo end")
        assert SECRET not in out and "end" in out
        ctx.workspace = inside
        out, error = bash(ctx, "cat notes.txt")
        assert not error and "mine" in out
    finally:
        namespaces.configure(hidden=())
    assert (data / "redis" / "password").read_text() == SECRET  # covered inside, untouched outside


def test_the_user_namespace_mode_as_an_unprivileged_user(tmp_path: Path) -> None:
    """`user` mode's command line, run by `nobody` (whose environment holds the secret, as a
    worker's would): its own uid, first process of its namespace, no capabilities left."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root (to become nobody) and setpriv")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    for folder in (tmp_path, workspace):
        folder.chmod(0o777)
    hidden = tmp_path / "private"
    hidden.mkdir(mode=0o777)
    (hidden / "password").write_text(SECRET)
    (hidden / "password").chmod(0o644)
    marker = unique_marker()
    command = (
        f"id -u; echo self=$$; grep CapEff /proc/self/status; tr '\\0' '\\n' < /proc/$PPID/environ;"
        f" cat {hidden}/password; umount {hidden} 2>&1; cat {hidden}/password;"
        f" setsid sleep {marker} > /dev/null 2>&1 & echo end"
    )
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
    done = subprocess.run(
        [*nobody, *namespaces.argv_for(Isolation.USER, command, [hidden])],
        env={"PATH": os.defpath, "ANTHROPIC_API_KEY": SECRET},
        cwd=workspace,
        capture_output=True,
        text=True,
        timeout=30,
    )
    if "end" not in done.stdout:
        pytest.skip(f"no unprivileged user namespaces here: {done.stderr.strip()[:200]}")
    out = done.stdout
    assert out.split()[0] == "65534" and "self=1" in out  # its own uid, first of its namespace
    assert "CapEff:\t0000000000000000" in out  # the namespace's capabilities were dropped ...
    assert SECRET not in out  # ... so the covered folder stays covered (umount refused)
    assert wait_gone(marker) == []


# A key of the caller's own, in its process keyring (gone when that process ends), then exec
# of the rest: the unprivileged caller's key, listed in /proc/keys outside the box.
ADD_KEY_THEN_EXEC = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
name, payload = sys.argv[1].encode(), b"a-payload"
key = libc.syscall(248, b"user", name, payload, ctypes.c_size_t(len(payload)), ctypes.c_int(-2))
print("key", "added" if key > 0 else os.strerror(ctypes.get_errno()), flush=True)
print("outside", "listed" if sys.argv[1] in open("/proc/keys").read() else "unlisted", flush=True)
os.execvp(sys.argv[2], sys.argv[2:])
"""


def test_an_unprivileged_box_lists_no_key_in_proc(open_tmp: Path) -> None:
    """Issue 40, item 5, in `user` mode (a worker under a dedicated user): the uid's key,
    listed in /proc/keys outside, is not listed inside the user namespace's own /proc."""
    if os.uname().machine != "x86_64":
        pytest.skip("the key is added with x86_64 system call numbers")
    if os.geteuid() != 0 or shutil.which("setpriv") is None or not os.access("/usr/bin/python3", os.X_OK):
        pytest.skip("needs root (to become nobody), setpriv and a /usr/bin/python3 nobody may run")
    name = f"worktrain-test-{os.getpid()}-{time.monotonic_ns() % 10**6}"
    command = (
        "echo keys=$(wc -c < /proc/keys) users=$(wc -c < /proc/key-users); cat /proc/keys /proc/key-users"
    )
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
    argv = namespaces.argv_for(Isolation.USER, command)
    done = subprocess.run(
        [*nobody, "/usr/bin/python3", "-c", ADD_KEY_THEN_EXEC, name, *argv],
        env={"PATH": os.defpath},
        cwd=open_tmp,
        capture_output=True,
        text=True,
        timeout=30,
    )
    out = done.stdout
    if "key added" not in out:
        pytest.skip(f"no keyring for nobody here: {out.strip()[:200]}")
    if "keys=" not in out:
        pytest.skip(f"no unprivileged user namespaces here: {done.stderr.strip()[:200]}")
    assert "outside listed" in out, out  # outside the box the key is listed
    inside = out.split("keys=", 1)[1]
    assert name not in inside and "65534:" not in inside and inside.startswith("0 users=0"), out


# ---- the fallback -----------------------------------------------------------------------------


def test_without_namespaces_the_group_is_killed_and_the_message_says_what_may_survive(
    ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(namespaces, "isolation", lambda: (Isolation.GROUP, "forced by the test"))
    in_group, escapee, background = unique_marker(), unique_marker() + "1", unique_marker() + "2"
    out, error = bash(
        ctx, f"sleep {in_group} & setsid sleep {escapee} > /dev/null 2>&1 & sleep {in_group}", timeout=1
    )
    assert error and "process group was killed" in out and "setsid" in out
    assert wait_gone(in_group) == []
    for pid in processes_with(escapee):  # the escapee the message warned about: cleaned up here
        os.kill(pid, 9)
    # a background child that stayed in the group dies when the command returns
    out, error = bash(ctx, f"sleep {background} > /dev/null 2>&1 & echo ok")
    assert not error and wait_gone(background) == []


def test_report_warns_once_without_namespaces(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(
        namespaces, "isolation", lambda: (Isolation.GROUP, "user: unshare failed: Operation not permitted")
    )
    assert namespaces.report() is Isolation.GROUP
    [record] = [r for r in caplog.records if r.name == "daemon.sandbox.namespaces"]
    assert record.levelname == "WARNING" and "WITHOUT a PID namespace" in record.getMessage()
    assert "Operation not permitted" in record.getMessage()


def test_run_command_in_each_available_mode_keeps_its_exit_code(ctx: ToolContext) -> None:
    modes = [namespaces.isolation()[0], Isolation.GROUP]
    for mode in modes:
        result = run_command("echo hi; exit 7", ctx.workspace, 30, {"PATH": os.defpath}, mode=mode)
        assert (result.exit_code, result.output.strip(), result.timed_out) == (7, "hi", False), mode


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A folder `nobody` can reach (pytest's tmp_path is under a root-only folder)."""
    with tempfile.TemporaryDirectory(prefix="worktrain-nobody-") as folder:
        Path(folder).chmod(0o777)
        yield Path(folder)


def test_every_layer_as_an_unprivileged_user(open_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole sandbox (launcher, Landlock, a network namespace, capabilities dropped) in
    `user` mode, run by `nobody`: the way a worker under a dedicated user runs its commands."""
    from daemon.sandbox import landlock, policy

    tmp_path = open_tmp
    if os.geteuid() != 0 or shutil.which("setpriv") is None or not os.access("/usr/bin/python3", os.X_OK):
        pytest.skip("needs root (to become nobody), setpriv and a /usr/bin/python3 nobody may run")
    abi = landlock.abi_version()[0]
    monkeypatch.setattr(namespaces, "PYTHON", "/usr/bin/python3")  # this test's venv is under /root
    workspace, tmpdir = tmp_path / "ws", tmp_path / "tmp"
    for folder in (workspace, tmpdir):
        folder.mkdir()
    for folder in (tmp_path, workspace, tmpdir):
        folder.chmod(0o777)
    (tmp_path / "other.txt").write_text("OTHER-SESSION\n")
    (tmp_path / "other.txt").chmod(0o644)  # readable by its mode bits: only Landlock stops it
    available = policy.Available(namespaced=True, landlock_abi=abi, netns=True)
    plan = policy.plan_for(workspace, tmpdir, available, policy.SandboxConfig(denied=(Path("/root"),)))
    # built by root for nobody: leave out what only root may open (this venv's Python)
    plan = replace(plan, read=tuple(p for p in plan.read if not p.startswith("/root/")))
    command = (
        "id -u; echo self=$$; grep -E '^(CapEff|NoNewPrivs)' /proc/self/status;"
        f" echo interfaces=$(tail -n +3 /proc/net/dev | wc -l);"
        f" cat {tmp_path}/other.txt; echo ok > f && cat f"
    )
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
    done = subprocess.run(
        [*nobody, *namespaces.argv_for(Isolation.USER, command, (), plan=plan, net=True)],
        env={"PATH": os.defpath},
        cwd=workspace,
        capture_output=True,
        text=True,
        timeout=30,
    )
    if "self=" not in done.stdout:
        pytest.skip(f"no unprivileged user namespaces here: {done.stderr.strip()[:200]}")
    out = done.stdout
    assert out.split()[0] == "65534" and "self=1" in out, out
    assert "CapEff:\t0000000000000000" in out and "NoNewPrivs:\t1" in out, out
    assert "interfaces=1" in out and out.rstrip().endswith("ok"), out
    if abi:
        assert "OTHER-SESSION" not in out and "Permission denied" in done.stderr, done.stderr
