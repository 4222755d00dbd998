"""The v3 tools (README's Coding sessions, issue 22): Edit with its read-before-write ledger, Glob and Grep
on real git repositories with the `rg` of the ripgrep wheel, Read's directory listing, and
the read-only workspace (Write/Edit refused, Bash's workspace not writable)."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from daemon.sandbox import namespaces
from daemon.tools import ToolContext, WorkflowCursor, default_toolbox
from daemon.tools.globbing import GLOB_MAX_RESULTS
from daemon.tools.ledger import FileLedger
from daemon.tools.ripgrep import rg_binary
from daemon.turn.messages import ToolUseBlock
from tests.agent.conftest import TWO_STEP, RecordingEvents

pytestmark = pytest.mark.processes

SID = "sess_01JD0000000000000000000000"


class NoIssues:
    def record(self, issue: Any) -> None:
        raise AssertionError(f"no issue expected: {issue}")


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True)
    return done.stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository with a .gitignore, an ignored build folder and a binary file."""
    ws = tmp_path / "repo"
    (ws / "src" / "pkg").mkdir(parents=True)
    (ws / "build").mkdir()
    (ws / ".gitignore").write_text("build/\n*.log\n")
    (ws / "src" / "main.py").write_text("import pkg\n\ndef main():\n    return compute(1)\n")
    (ws / "src" / "pkg" / "util.py").write_text("def compute(x):\n    return x * 2  # compute(x)\n")
    (ws / "build" / "main.py").write_text("def compute(x): pass  # generated\n")
    (ws / "debug.log").write_text("compute called\n")
    (ws / "blob.bin").write_bytes(b"\x00\x01compute\x00" * 100)
    (ws / "notes.md").write_text("price: $5 (approx.) [draft] a+b*c?\n")
    git(ws, "init", "-q")
    return ws


def context(workspace: Path, read_only: bool = False) -> ToolContext:
    return ToolContext(
        SID, 1, workspace, WorkflowCursor(TWO_STEP), RecordingEvents(), NoIssues(), read_only=read_only
    )


@pytest.fixture
def ctx(repo: Path) -> ToolContext:
    return context(repo)


def call(ctx: ToolContext, name: str, **tool_input: Any) -> tuple[str, bool]:
    result = default_toolbox().run(ToolUseBlock(id="t1", name=name, input=tool_input), ctx)
    return result.content, result.is_error


# --- Edit -------------------------------------------------------------------------------------


def test_edit_replaces_a_unique_string_after_a_read(ctx: ToolContext) -> None:
    call(ctx, "Read", path="src/pkg/util.py")
    out, error = call(ctx, "Edit", path="src/pkg/util.py", old_string="x * 2", new_string="x * 3")
    assert not error and out == "Edited src/pkg/util.py: replaced 1 occurrence."
    assert (
        ctx.workspace / "src/pkg/util.py"
    ).read_text() == "def compute(x):\n    return x * 3  # compute(x)\n"
    # its own edit does not make the file stale: a second edit needs no new read
    out, error = call(ctx, "Edit", path="src/pkg/util.py", old_string="x * 3", new_string="x + x")
    assert not error, out


def test_edit_of_a_string_occurring_several_times_says_how_many(ctx: ToolContext) -> None:
    call(ctx, "Read", path="src/pkg/util.py")
    before = (ctx.workspace / "src/pkg/util.py").read_text()
    out, error = call(ctx, "Edit", path="src/pkg/util.py", old_string="compute(x)", new_string="f(x)")
    assert error and "occurs 2 times" in out and "replace_all" in out
    assert (ctx.workspace / "src/pkg/util.py").read_text() == before


def test_edit_replace_all(ctx: ToolContext) -> None:
    call(ctx, "Read", path="src/pkg/util.py")
    out, error = call(
        ctx, "Edit", path="src/pkg/util.py", old_string="compute(x)", new_string="f(x)", replace_all=True
    )
    assert not error and "replaced 2 occurrences" in out
    assert (ctx.workspace / "src/pkg/util.py").read_text().count("f(x)") == 2


def test_edit_refuses_identical_strings_missing_text_and_line_prefixes(ctx: ToolContext) -> None:
    call(ctx, "Read", path="src/main.py")
    out, error = call(ctx, "Edit", path="src/main.py", old_string="main", new_string="main")
    assert error and "identical" in out
    out, error = call(ctx, "Edit", path="src/main.py", old_string="nowhere", new_string="x")
    assert error and "not found" in out
    out, error = call(ctx, "Edit", path="src/main.py", old_string="     3\tdef main():", new_string="x")
    assert error and "line-number prefixes" in out


def test_edit_and_write_refuse_a_file_never_read_or_changed_since(ctx: ToolContext) -> None:
    target = ctx.workspace / "src/main.py"
    out, error = call(ctx, "Edit", path="src/main.py", old_string="import pkg", new_string="import os")
    assert error and "not read it" in out
    out, error = call(ctx, "Write", path="src/main.py", content="overwritten")
    assert error and "not read it" in out
    call(ctx, "Read", path="src/main.py")
    target.write_text(target.read_text().replace("pkg", "other"))  # someone else changes it
    out, error = call(ctx, "Edit", path="src/main.py", old_string="import other", new_string="import os")
    assert error and "read it again" in out
    out, error = call(ctx, "Write", path="src/main.py", content="overwritten")
    assert error and "read it again" in out
    assert target.read_text().startswith("import other")
    call(ctx, "Read", path="src/main.py")  # read again: now it may change it
    out, error = call(ctx, "Edit", path="src/main.py", old_string="import other", new_string="import os")
    assert not error, out
    # a new file needs no read; writing it marks it
    assert not call(ctx, "Write", path="new.txt", content="one")[1]
    assert not call(ctx, "Edit", path="new.txt", old_string="one", new_string="two")[1]


def test_the_ledger_round_trips_through_its_json(ctx: ToolContext) -> None:
    call(ctx, "Read", path="src/main.py")
    restored = context(ctx.workspace)
    restored.files = FileLedger.from_json(ctx.files.to_json())
    out, error = call(restored, "Edit", path="src/main.py", old_string="import pkg", new_string="import os")
    assert not error, out
    assert FileLedger.from_json("not json").marks == {} and FileLedger.from_json(None).marks == {}


def test_edit_stays_in_the_workspace(ctx: ToolContext, tmp_path: Path) -> None:
    outside = tmp_path / "outside.py"
    outside.write_text("secret = 1\n")
    (ctx.workspace / "link.py").symlink_to(outside)
    for path in ("../outside.py", str(outside), "link.py"):
        out, error = call(ctx, "Edit", path=path, old_string="secret", new_string="x")
        assert error and "outside the workspace" in out
    assert outside.read_text() == "secret = 1\n"


# --- Read of a directory ----------------------------------------------------------------------


def test_read_of_a_directory_lists_names_kinds_and_sizes(ctx: ToolContext) -> None:
    out, error = call(ctx, "Read", path="src")
    assert not error
    assert "main.py\tfile\t" + str((ctx.workspace / "src/main.py").stat().st_size) in out
    assert "pkg/\tdir" in out and "2 entries" in out


# --- Glob -------------------------------------------------------------------------------------


def test_glob_honours_gitignore_and_anchors_like_a_shell_glob(ctx: ToolContext) -> None:
    out, error = call(ctx, "Glob", pattern="**/*.py")
    assert not error and sorted(out.splitlines()) == ["src/main.py", "src/pkg/util.py"]
    assert call(ctx, "Glob", pattern="*.md")[0] == "notes.md"
    assert "No files match" in call(ctx, "Glob", pattern="*.py")[0]  # none at the top
    assert call(ctx, "Glob", pattern="*.py", path="src/pkg")[0] == "src/pkg/util.py"
    assert "debug.log" not in call(ctx, "Glob", pattern="*")[0]


def test_glob_lists_newest_first(ctx: ToolContext) -> None:
    os.utime(ctx.workspace / "src/main.py", (1_000_000_000, 1_000_000_000))
    os.utime(ctx.workspace / "src/pkg/util.py", (2_000_000_000, 2_000_000_000))
    assert call(ctx, "Glob", pattern="**/*.py")[0].splitlines() == ["src/pkg/util.py", "src/main.py"]


def test_glob_and_grep_refuse_paths_outside(ctx: ToolContext) -> None:
    for name, extra in (("Glob", {"pattern": "*"}), ("Grep", {"pattern": "x"})):
        out, error = call(ctx, name, path="..", **extra)
        assert error and "outside the workspace" in out


# --- Grep -------------------------------------------------------------------------------------


def test_grep_skips_ignored_and_binary_files(ctx: ToolContext) -> None:
    out, error = call(ctx, "Grep", pattern="compute")
    assert not error and sorted(out.splitlines()) == ["src/main.py", "src/pkg/util.py"]
    out, _ = call(ctx, "Grep", pattern="compute", output_mode="count")
    assert sorted(out.splitlines()) == ["src/main.py:1", "src/pkg/util.py:2"]


def test_grep_content_with_line_numbers_context_case_glob_and_type(ctx: ToolContext) -> None:
    out, error = call(ctx, "Grep", pattern="RETURN", output_mode="content", **{"-i": True}, glob="**/util.py")
    assert not error and out == "src/pkg/util.py:2:    return x * 2  # compute(x)"
    out, _ = call(ctx, "Grep", pattern="def main", output_mode="content", context=1, type="py")
    assert out.splitlines() == [
        "src/main.py-2-",
        "src/main.py:3:def main():",
        "src/main.py-4-    return compute(1)",
    ]
    out, _ = call(
        ctx, "Grep", pattern="compute", output_mode="content", path="src/pkg/util.py", **{"-n": False}
    )
    assert out.splitlines()[0] == "src/pkg/util.py:def compute(x):"


def test_grep_regex_metacharacters(ctx: ToolContext) -> None:
    out, error = call(ctx, "Grep", pattern=r"\$5 \(approx\.\) \[draft\] a\+b\*c\?", output_mode="content")
    assert not error and out.startswith("notes.md:1:price")
    out, error = call(ctx, "Grep", pattern="[draft", output_mode="content")  # an unclosed class
    assert error and "regex parse error" in out
    out, error = call(ctx, "Grep", pattern="-x", output_mode="content")  # a pattern, not a flag
    assert not error and "No matches" in out


def test_rg_is_the_binary_of_the_ripgrep_wheel() -> None:
    dist = importlib.metadata.distribution("ripgrep")
    assert rg_binary().is_file() and str(rg_binary()).startswith(str(Path(sys.prefix)))
    assert any(entry.name == "rg" for entry in dist.files or ())
    version = subprocess.run([str(rg_binary()), "--version"], capture_output=True, text=True, check=True)
    assert version.stdout.startswith(f"ripgrep {dist.version}")


def test_ten_thousand_files_are_capped_and_the_cut_said(tmp_path: Path) -> None:
    ws = tmp_path / "many"
    for folder in range(100):
        (ws / f"d{folder:03d}").mkdir(parents=True)
        for index in range(100):
            (ws / f"d{folder:03d}" / f"f{index:03d}.txt").write_text(f"needle {folder} {index}\n")
    ctx = context(ws)
    out, error = call(ctx, "Glob", pattern="**/*.txt")
    lines = out.splitlines()
    assert not error and len(lines) == GLOB_MAX_RESULTS + 1 and "only the 1000 newest" in lines[-1]
    out, error = call(ctx, "Grep", pattern="needle", output_mode="content", head_limit=50)
    lines = out.splitlines()
    assert not error and len(lines) == 51 and "cut at 50 lines" in lines[-1]
    out, _ = call(ctx, "Grep", pattern="needle 42 17$", output_mode="content")
    assert out == "d042/f017.txt:1:needle 42 17"


# --- read-only workspace ----------------------------------------------------------------------


def test_read_only_refuses_write_and_edit(repo: Path) -> None:
    ctx = context(repo, read_only=True)
    call(ctx, "Read", path="src/main.py")
    for name, extra in (("Write", {"content": "x"}), ("Edit", {"old_string": "pkg", "new_string": "os"})):
        out, error = call(ctx, name, path="src/main.py", **extra)
        assert error and "read-only" in out
    assert not (repo / "x").exists() and "import pkg" in (repo / "src/main.py").read_text()


@pytest.mark.skipif(not namespaces.isolation()[0].namespaced, reason="no mount namespace on this host")
def test_read_only_bash_cannot_write_the_workspace_but_reads_and_runs_git_log(repo: Path) -> None:
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first commit")
    ctx = context(repo, read_only=True)
    out, _ = call(ctx, "Bash", command="touch made.txt; echo > src/main.py; echo rc=$?")
    assert "Read-only file system" in out and not (repo / "made.txt").exists()
    assert "import pkg" in (repo / "src/main.py").read_text()
    # nor undo the mount (as root, its capabilities are dropped in a read-only session)
    out, _ = call(ctx, "Bash", command="mount -o remount,rw,bind . 2>&1; touch made.txt 2>&1; echo rc=$?")
    assert "rc=1" in out and not (repo / "made.txt").exists(), out
    out, error = call(
        ctx, "Bash", command="cat src/main.py && git log --oneline && touch $TMPDIR/ok 2>&1; echo rc=$?"
    )
    assert not error and "import pkg" in out and "first commit" in out
    writable = context(repo)  # the same command in a normal session writes
    call(writable, "Bash", command="touch made.txt")
    assert (repo / "made.txt").exists()


def test_glob_and_grep_never_follow_a_symlink_out(ctx: ToolContext, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.py").write_text("SECRET = 'needle-outside'\n")
    (ctx.workspace / "escape").symlink_to(outside)
    (ctx.workspace / "escape.py").symlink_to(outside / "secret.py")
    out, _ = call(ctx, "Grep", pattern="needle-outside", output_mode="content")
    assert "No matches" in out
    out, _ = call(ctx, "Glob", pattern="**/secret.py")
    assert "No files match" in out
    for path in ("escape", "escape.py", str(outside)):
        out, error = call(ctx, "Grep", pattern="needle", path=path)
        assert error and "outside the workspace" in out and "needle-outside" not in out
