"""The five tools and the toolbox: typed input, path confinement, Bash bounds, errors as data."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from daemon.tools import TOOL_NAMES, Tool, ToolContext, ToolOutput, WorkflowCursor, default_toolbox
from daemon.tools.bash import CappedOutput, run_command, scrub_env
from daemon.turn.messages import ToolUseBlock
from tests.agent.conftest import TWO_STEP, RecordingEvents
from tests.agent.procscan import wait_gone

pytestmark = pytest.mark.unit

SID = "sess_01JD0000000000000000000000"


class ListIssues:
    def __init__(self) -> None:
        self.issues: list[Any] = []

    def record(self, issue: Any) -> None:
        self.issues.append(issue)


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "a.txt").write_text("one\ntwo\nthree\n")
    return ToolContext(SID, 3, workspace, WorkflowCursor(TWO_STEP), RecordingEvents(), ListIssues())


def call(ctx: ToolContext, name: str, **tool_input: Any) -> tuple[str, bool]:
    result = default_toolbox().run(ToolUseBlock(id="t1", name=name, input=tool_input), ctx)
    return result.content, result.is_error


# --- Read / Write: nothing outside the workspace ------------------------------------------


def test_read_numbers_lines_and_pages(ctx: ToolContext) -> None:
    out, error = call(ctx, "Read", path="a.txt")
    assert not error and out.splitlines()[0].endswith("1\tone") and "three" in out
    out, _ = call(ctx, "Read", path="a.txt", offset=2, limit=1)
    assert "two" in out and "one" not in out and "[lines 2-2; more follow: use offset=3]" in out


def test_read_lists_a_directory_and_refuses_binary(ctx: ToolContext) -> None:
    (ctx.workspace / "sub").mkdir()
    (ctx.workspace / "bin.dat").write_bytes(b"\x00\x01\x02")
    out, error = call(ctx, "Read", path=".")
    assert not error and "sub/" in out and "a.txt" in out
    out, error = call(ctx, "Read", path="bin.dat")
    assert "binary file" in out


@pytest.mark.parametrize("path", ["../outside.txt", "sub/../../outside.txt", "OUTSIDE_ABS", "a\x00b"])
def test_paths_escaping_the_workspace_are_refused(ctx: ToolContext, path: str) -> None:
    outside = ctx.workspace.parent / "outside.txt"
    outside.write_text("secret")
    path = str(outside) if path == "OUTSIDE_ABS" else path
    out, error = call(ctx, "Read", path=path)
    assert error and "secret" not in out
    out, error = call(ctx, "Write", path=path, content="overwritten")
    assert error
    assert outside.read_text() == "secret"


def test_symlinks_pointing_out_are_refused_for_read_and_write(ctx: ToolContext) -> None:
    outside_dir = ctx.workspace.parent / "elsewhere"
    outside_dir.mkdir()
    (outside_dir / "f.txt").write_text("secret")
    (ctx.workspace / "link.txt").symlink_to(outside_dir / "f.txt")
    (ctx.workspace / "linkdir").symlink_to(outside_dir)
    for path in ("link.txt", "linkdir/f.txt", "linkdir/new.txt"):
        out, error = call(ctx, "Read", path=path)
        assert error and "outside the workspace" in out
        out, error = call(ctx, "Write", path=path, content="x")
        assert error
    assert (outside_dir / "f.txt").read_text() == "secret"
    assert not (outside_dir / "new.txt").exists()


def test_symlinks_inside_and_absolute_paths_inside_are_fine(ctx: ToolContext) -> None:
    (ctx.workspace / "alias.txt").symlink_to(ctx.workspace / "a.txt")
    assert "three" in call(ctx, "Read", path="alias.txt")[0]
    assert "three" in call(ctx, "Read", path=str(ctx.workspace / "a.txt"))[0]


def test_write_creates_parents_and_reports_bytes(ctx: ToolContext) -> None:
    out, error = call(ctx, "Write", path="docs/new/NOTES.md", content="héllo")
    assert not error and out == "Wrote 6 bytes to docs/new/NOTES.md."
    assert (ctx.workspace / "docs/new/NOTES.md").read_text() == "héllo"


# --- Bash -------------------------------------------------------------------------------------


@pytest.mark.processes
def test_bash_runs_in_the_workspace_with_stdin_closed(ctx: ToolContext) -> None:
    started = time.monotonic()
    out, error = call(ctx, "Bash", command="pwd; cat; echo done", timeout_seconds=20)
    assert not error and str(ctx.workspace.resolve()) in out and "done" in out and "[exit code 0]" in out
    assert time.monotonic() - started < 10  # `cat` read EOF instead of waiting
    out, error = call(ctx, "Bash", command="exit 3")
    assert not error and "[exit code 3]" in out


@pytest.mark.processes
def test_bash_timeout_kills_the_whole_process_tree(ctx: ToolContext) -> None:
    marker = f"{os.getpid() % 1000 + 7000}.{time.monotonic_ns() % 100000}"
    command = f"(sleep {marker} & wait) & sleep {marker}"
    out, error = call(ctx, "Bash", command=command, timeout_seconds=1)
    assert error and "timed out after 1s" in out
    assert wait_gone(marker) == [], "a child survived the timeout"


@pytest.mark.processes
def test_bash_output_keeps_head_and_tail_and_says_the_cut(ctx: ToolContext) -> None:
    result = run_command("seq 1 200000", ctx.workspace, 30, os.environ, cap=2000)
    assert result.output.startswith("1\n2\n3\n")
    assert result.output.rstrip().endswith("200000")
    assert "bytes cut ...]" in result.output and len(result.output) < 2200


def test_capped_output_counts_exactly() -> None:
    capped = CappedOutput(10)
    for chunk in (b"abc", b"defgh", b"ijklmnop", b"qrst"):
        capped.feed(chunk)
    assert capped.text() == "abcde\n[... 10 bytes cut ...]\npqrst"
    small = CappedOutput(100)
    small.feed(b"short")
    assert small.text() == "short"


@pytest.mark.processes
def test_bash_environment_has_no_daemon_secrets(ctx: ToolContext, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret")
    monkeypatch.setenv("WORKTRAIN_API_TOKEN", "tok-secret")
    monkeypatch.setenv("REDIS_URL", "redis://:pw-secret@localhost:6379/0")
    monkeypatch.setenv("SOME_DB_URL", "postgres://u:pg-secret@db/x")
    monkeypatch.setenv("GITHUB_TOKEN", "gh-secret")
    monkeypatch.setenv("HARMLESS", "visible")
    out, _ = call(ctx, "Bash", command="env")
    assert "visible" in out
    for secret in ("sk-ant-secret", "tok-secret", "pw-secret", "pg-secret", "gh-secret"):
        assert secret not in out
    assert "PATH" in scrub_env({"PATH": "/bin", "API_KEY": "x"}) and "API_KEY" not in scrub_env(
        {"API_KEY": "x"}
    )


# --- toolbox, continue_workflow, report_issue -------------------------------------------------


def test_tool_specs_are_json_schemas_of_the_inputs() -> None:
    specs = {spec["name"]: spec for spec in default_toolbox().specs()}
    assert list(specs) == list(TOOL_NAMES)
    assert specs["continue_workflow"]["input_schema"]["properties"]["notes"]["minLength"] == 50
    assert specs["report_issue"]["input_schema"]["required"] == ["kind", "severity", "summary"]
    assert specs["Read"]["input_schema"]["type"] == "object"


def test_a_tool_that_raises_becomes_an_error_result(ctx: ToolContext) -> None:
    from pydantic import BaseModel

    class Empty(BaseModel):
        pass

    def boom(args: Empty, ctx: ToolContext) -> ToolOutput:
        raise RuntimeError("kaput")

    toolbox = default_toolbox()
    toolbox.tools["boom"] = Tool("boom", "explodes", Empty, boom)
    result = toolbox.run(ToolUseBlock(id="t9", name="boom", input={}), ctx)
    assert result.is_error and "RuntimeError: kaput" in result.content
    assert [e.kind for e in ctx.events.events][-1] == "tool_call_failed"  # type: ignore[attr-defined]


def test_continue_workflow_advances_pushes_the_step_text_and_completes(ctx: ToolContext) -> None:
    notes = "x" * 50
    use = ToolUseBlock(id="t1", name="continue_workflow", input={"notes": notes, "context": {"k": 1}})
    done = default_toolbox().call(use, ctx)
    body = json.loads(done.result.content)
    assert not done.result.is_error and body["status"] == "advanced" and body["step"]["id"] == "write"
    assert body["step"]["prompt"] == TWO_STEP.steps[1].prompt
    assert done.output.step_text == TWO_STEP.steps[1].prompt  # the effect, on the output
    assert done.output.cursor is not None and ctx.cursor.index == 0  # the tool moved nothing itself
    ctx.cursor.apply(done.output.cursor)  # as the loop does
    assert ctx.cursor.index == 1 and ctx.cursor.current_prompt == TWO_STEP.steps[1].prompt
    last = default_toolbox().call(use.model_copy(update={"input": {"notes": notes}}), ctx)
    assert json.loads(last.result.content) == {"status": "complete"} and not ctx.cursor.complete
    ctx.cursor.apply(last.output.cursor)
    assert ctx.cursor.complete
    advanced = [e for e in ctx.events.events if e.kind == "step_advanced"]  # type: ignore[attr-defined]
    assert [(e.fromStepId, e.toStepId, e.stepIndex) for e in advanced] == [
        ("look", "write", 1),
        ("write", None, 2),
    ]
    assert advanced[0].notes == notes and advanced[0].context == {"k": 1}
    out, error = call(ctx, "continue_workflow", notes="short")
    assert error and "at least 50 characters" in out


def test_report_issue_records_and_answers(ctx: ToolContext) -> None:
    out, error = call(ctx, "report_issue", kind="tool_failure", severity="warn", summary="git is missing")
    assert (
        not error and out == "Issue recorded (severity=warn). Continue with your work unless this is fatal."
    )
    [issue] = ctx.issues.issues  # type: ignore[attr-defined]
    assert (issue.sessionId, issue.turnId, issue.kind) == (SID, 3, "tool_failure")
    out, error = call(ctx, "report_issue", kind="nonsense", severity="warn", summary="x" * 201)
    assert error and "kind" in out and "summary" in out
    fatal = {"kind": "blocked", "severity": "fatal", "summary": "no way on"}
    done = default_toolbox().call(ToolUseBlock(id="t2", name="report_issue", input=fatal), ctx)
    assert "continue_workflow" in done.result.content and not ctx.cursor.fatal_issue
    ctx.cursor.apply(done.output.cursor)  # as the loop does
    assert ctx.cursor.fatal_issue
    finish = ToolUseBlock(id="t3", name="continue_workflow", input={"notes": "x" * 50})
    ended = default_toolbox().call(finish, ctx)
    assert json.loads(ended.result.content)["status"] == "ended" and not ctx.cursor.ended_fatal
    ctx.cursor.apply(ended.output.cursor)
    assert ctx.cursor.ended_fatal
