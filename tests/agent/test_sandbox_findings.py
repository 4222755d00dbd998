"""Regression tests for issue 21's findings M1 (Read/Write and the data dir; workspace roots),
M3 (AGENTS.md / CLAUDE.md read at session start) and L3 (the fallback, forced, said loudly;
WORKTRAIN_SANDBOX=required refuses), each re-tested the way it was found."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from daemon.agent.prompt import PROJECT_NOTES_CAP, gather_prompt_inputs
from daemon.fakemodel import ScriptedModel, reply, tool
from daemon.host.config import Settings
from daemon.sandbox import namespaces, policy, report, roots
from daemon.sandbox.namespaces import Isolation
from daemon.sandbox.report import SandboxUnavailable
from daemon.tools import ToolContext
from tests.agent.conftest import Harness, call_tool

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
SID = "sess_01JD0000000000000000000000"
SECRET = "redis-pw-m1-" + "5e7a" * 6


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    """A data dir holding a Redis password and `up.json`, configured as this worker's."""
    data = tmp_path / "data"
    (data / "redis").mkdir(parents=True)
    (data / "redis" / "password").write_text(SECRET)
    (data / "up.json").write_text('{"apiUrl": "http://127.0.0.1:3456"}')
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("PLANTED-KEY\n")
    roots.configure(roots.Roots(data, home=home))
    try:
        yield data
    finally:
        roots._current = None


# ---- M1: Read and Write never touch the data dir -----------------------------------------------


@pytest.mark.parametrize("where", ["the data dir", "above it", "/"])
def test_read_and_write_refuse_the_data_dir_whatever_the_workspace(
    workspace_ctx: ToolContext, data_dir: Path, where: str
) -> None:
    """The finding: a workspace of the data dir (or `/`) let Read return `redis/password` and
    Write rewrite `up.json` (sending the CLI's token elsewhere)."""
    workspace_ctx.workspace = {"the data dir": data_dir, "above it": data_dir.parent, "/": Path("/")}[where]
    prefix = os.path.relpath(data_dir, workspace_ctx.workspace)
    for path in (f"{prefix}/redis/password", str(data_dir / "redis" / "password"), f"{prefix}/redis"):
        out, error = call_tool(workspace_ctx, "Read", path=path.removeprefix("./"))
        assert error and SECRET not in out and "data dir" in out, (path, out)
    out, error = call_tool(
        workspace_ctx, "Write", path=f"{prefix}/up.json", content='{"apiUrl": "http://evil"}'
    )
    assert error and "data dir" in out
    out, error = call_tool(workspace_ctx, "Write", path=f"{prefix}/planted.txt", content="x")
    assert error and not (data_dir / "planted.txt").exists()
    assert "127.0.0.1:3456" in (data_dir / "up.json").read_text()
    home_key = data_dir.parent / "home" / ".ssh" / "id_ed25519"
    out, error = call_tool(workspace_ctx, "Read", path=os.path.relpath(home_key, workspace_ctx.workspace))
    assert error and "PLANTED-KEY" not in out, out
    if where == "above it":  # everything else in that workspace works as before
        (data_dir.parent / "fine.txt").write_text("fine\n")
        assert call_tool(workspace_ctx, "Read", path="fine.txt") == ("     1\tfine", False)


def test_workspace_roots_refusals(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    free = roots.Roots(data)
    assert free.refusal(tmp_path / "ws") is None
    assert "is /" in (free.refusal(Path("/")) or "")
    assert "inside WorkTrain's data dir" in (free.refusal(data) or "")
    assert "inside WorkTrain's data dir" in (free.refusal(data / "workspaces" / "x") or "")
    assert "holds WorkTrain's data dir" in (free.refusal(tmp_path) or "")
    bounded = roots.Roots(data, roots=(tmp_path / "projects",))
    assert bounded.refusal(tmp_path / "projects" / "a") is None
    assert "outside WORKTRAIN_WORKSPACE_ROOTS" in (bounded.refusal(tmp_path / "elsewhere") or "")
    settings = Settings(_env_file=None, workspace_roots=f"{tmp_path}/a{os.pathsep}~/b")  # type: ignore[call-arg]
    assert settings.workspace_roots == (tmp_path / "a", Path.home() / "b")


def test_the_worker_refuses_a_session_in_the_data_dir_before_any_tool_runs(
    harness: Harness, data_dir: Path
) -> None:
    harness.create(workspace=data_dir)
    model = ScriptedModel([reply(tool("Bash", command=f"cat {data_dir}/redis/password"))])
    assert harness.run(model) == "workspace_not_allowed"
    assert model.requests == []  # not one model call, so not one tool
    record = harness.record()
    assert record.status == "failed" and record.outcome == "workspace_not_allowed"
    assert "data dir" in (record.outcomeDetail or "")


# ---- M3: the prompt's notes files -------------------------------------------------------------


def _gather(workspace: Path) -> dict[str, str]:
    return dict(gather_prompt_inputs(SID, "w", "W", 1, "g", workspace, None).project_notes)


def test_a_fifo_notes_file_does_not_hang_the_session(tmp_path: Path) -> None:
    """The finding: AGENTS.md as a FIFO hung the session forever (cancel ignored)."""
    os.mkfifo(tmp_path / "AGENTS.md")
    (tmp_path / "CLAUDE.md").write_text("# real notes\n")
    found: list[dict[str, str]] = []
    reader = threading.Thread(target=lambda: found.append(_gather(tmp_path)), daemon=True)
    reader.start()
    reader.join(10)
    assert not reader.is_alive(), "reading a FIFO AGENTS.md hung"
    assert found == [{"CLAUDE.md": "# real notes\n"}]


@pytest.mark.processes
def test_a_sparse_400_mib_notes_file_costs_only_its_cap(tmp_path: Path) -> None:
    """The finding: a sparse 400 MiB CLAUDE.md took the worker from 105 MB to 924 MB. Measured
    in a fresh process: its peak RSS grows by about the cap, not the file."""
    with open(tmp_path / "CLAUDE.md", "wb") as handle:
        handle.write(b"# notes\n")
        handle.truncate(400 << 20)
    script = (
        "import resource, sys\n"
        "from pathlib import Path\n"
        "from daemon.agent.prompt import gather_prompt_inputs\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "notes = dict(gather_prompt_inputs('s', 'w', 'W', 1, 'g', Path(sys.argv[1]), None).project_notes)\n"
        "after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "print(after - before, len(notes['CLAUDE.md']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    grown_kib, length = map(int, done.stdout.split())
    assert grown_kib < 20 * 1024, f"reading the notes grew the process by {grown_kib} KiB"
    assert PROJECT_NOTES_CAP <= length < PROJECT_NOTES_CAP + 100  # the cut, and the note saying so


def test_a_notes_file_is_walked_not_resolved(tmp_path: Path) -> None:
    """No resolve-then-read: a symlink out is refused on the walk itself; one inside works;
    a hard link (another name of a file that may be outside) is refused, as Read does."""
    workspace = tmp_path / "ws"
    (workspace / "docs").mkdir(parents=True)
    (tmp_path / "secret.md").write_text("OUTSIDE SECRET\n")
    (workspace / "AGENTS.md").symlink_to(tmp_path / "secret.md")
    (workspace / "docs" / "claude.md").write_text("# inside\n")
    (workspace / "CLAUDE.md").symlink_to("docs/claude.md")
    assert _gather(workspace) == {"CLAUDE.md": "# inside\n"}
    (workspace / "AGENTS.md").unlink()
    os.link(tmp_path / "secret.md", workspace / "AGENTS.md")
    assert "AGENTS.md" not in _gather(workspace)


# ---- L3: the fallback, forced; required refuses ------------------------------------------------


@pytest.fixture
def forced(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """WORKTRAIN_SANDBOX_FAULT honoured (a test's gate), the isolation probe re-run."""
    monkeypatch.setenv("WORKTRAIN_FAULTS", "1")
    namespaces.isolation.cache_clear()
    before, was = policy.current(), policy.configured()
    try:
        yield monkeypatch
    finally:
        monkeypatch.delenv("WORKTRAIN_SANDBOX_FAULT", raising=False)
        namespaces.isolation.cache_clear()
        report._probed = None
        policy.configure(before)
        policy._configured = was


@pytest.mark.processes
def test_the_forced_fallback_is_named_missing_and_landlock_still_guards_the_data_dir(
    forced: pytest.MonkeyPatch, tmp_path: Path, workspace_ctx: ToolContext
) -> None:
    """The finding: without namespaces the fallback was said only in a log file, and in it
    Bash read the Redis password. Now the layer is named missing (banner, log, workers API),
    and Landlock, which needs no namespace, still keeps the data dir out of reach."""
    forced.setenv("WORKTRAIN_SANDBOX_FAULT", "no-namespaces")
    data = tmp_path / "data"
    (data / "redis").mkdir(parents=True)
    (data / "redis" / "password").write_text(SECRET)
    probe = report.setup(Settings(_env_file=None, data_dir=data))  # type: ignore[call-arg]
    assert namespaces.isolation()[0] is Isolation.GROUP
    assert probe.layers["pid_namespace"].startswith("missing: forced")
    assert report.missing(probe.layers) == {"pid_namespace", "ipc_namespace", "network"}
    lines = "\n".join(report.banner_lines(probe.layers))
    assert "WARNING:    agent commands run without pid_namespace" in lines
    assert "WARNING:    agent commands run without network" in lines
    assert probe.layers["seccomp"].startswith("on"), probe.layers  # needs no namespace either
    if probe.layers["landlock"].startswith("abi"):
        out, _ = call_tool(workspace_ctx, "Bash", command=f"cat {data}/redis/password; echo end")
        assert SECRET not in out and "Permission denied" in out, out


@pytest.mark.processes
def test_required_refuses_to_run_without_every_layer(forced: pytest.MonkeyPatch, tmp_path: Path) -> None:
    forced.setenv("WORKTRAIN_SANDBOX_FAULT", "no-landlock")
    with pytest.raises(SandboxUnavailable, match=r"WORKTRAIN_SANDBOX=required .* landlock"):
        report.setup(Settings(_env_file=None, data_dir=tmp_path, sandbox="required"))  # type: ignore[call-arg]
    egress = Settings(_env_file=None, data_dir=tmp_path, sandbox_network="egress", sandbox_ports="443,6390")  # type: ignore[call-arg]
    egress = egress.model_copy(update={"redis_url": "redis://127.0.0.1:6390/0"})
    with pytest.raises(SandboxUnavailable, match="Redis port 6390"):
        report.setup(egress)


@pytest.mark.processes
def test_without_seccomp_the_layer_is_named_missing_and_required_refuses(
    forced: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    forced.setenv("WORKTRAIN_SANDBOX_FAULT", "no-seccomp")
    probe = report.setup(Settings(_env_file=None, data_dir=tmp_path))  # type: ignore[call-arg]
    assert probe.layers["seccomp"] == "missing: forced by WORKTRAIN_SANDBOX_FAULT (a test)"
    assert not probe.available.seccomp and "seccomp" in report.missing(probe.layers)
    assert "agent commands run without seccomp" in "\n".join(report.banner_lines(probe.layers))
    with pytest.raises(SandboxUnavailable, match=r"missing: seccomp \(missing: forced"):
        report.setup(Settings(_env_file=None, data_dir=tmp_path, sandbox="required"))  # type: ignore[call-arg]


@pytest.mark.processes
def test_a_worker_under_required_exits_saying_which_layer_is_missing(tmp_path: Path) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("WORKTRAIN_", "REDIS_"))},
        "WORKTRAIN_DATA_DIR": str(tmp_path / "data"),
        "WORKTRAIN_SANDBOX": "required",
        "WORKTRAIN_FAULTS": "1",
        "WORKTRAIN_SANDBOX_FAULT": "no-landlock",
        "REDIS_URL": "redis://127.0.0.1:9/0",  # never reached: the sandbox check comes first
    }
    done = subprocess.run(
        [sys.executable, "-m", "cli", "worker", "--processes", "1"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "WORKTRAIN_SANDBOX=required and these sandbox layers are missing: landlock" in done.stderr
