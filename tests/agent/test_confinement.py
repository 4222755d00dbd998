"""Read and Write stay inside the workspace under attack (issue 10, finding 8): a directory
swapped for a symlink while the call runs, hard links to outside files, FIFOs, huge files."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from daemon.tools import ToolContext
from tests.agent.conftest import call_tool

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
SID = "sess_01JD0000000000000000000000"
AT_FDCWD = -100
RENAME_EXCHANGE = 2


@pytest.fixture
def ctx(workspace_ctx: ToolContext) -> ToolContext:
    return workspace_ctx


call = call_tool


def _exchanger(a: Path, b: Path, stop: threading.Event) -> threading.Thread:
    libc = ctypes.CDLL(None, use_errno=True)
    if not hasattr(libc, "renameat2"):
        pytest.skip("no renameat2 in this libc")

    def swap() -> None:
        while not stop.is_set():
            libc.renameat2(AT_FDCWD, bytes(a), AT_FDCWD, bytes(b), RENAME_EXCHANGE)

    return threading.Thread(target=swap, daemon=True)


def test_a_directory_swapped_for_a_symlink_mid_call_never_lets_read_or_write_out(
    ctx: ToolContext, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f.txt").write_text("OUTSIDE\n")
    (ctx.workspace / "sub").mkdir()
    (ctx.workspace / "sub" / "f.txt").write_text("inside\n")
    (ctx.workspace / "swap").symlink_to("../outside")  # RENAME_EXCHANGE flips it with sub/
    stop = threading.Event()
    swapper = _exchanger(ctx.workspace / "sub", ctx.workspace / "swap", stop)
    swapper.start()
    reads = {"inside": 0, "refused": 0}
    try:
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            out, error = call(ctx, "Read", path="sub/f.txt")
            assert "OUTSIDE" not in out, "Read returned a file outside the workspace"
            reads["inside" if not error else "refused"] += 1
            call(ctx, "Write", path="sub/new.txt", content="written")
            assert not (outside / "new.txt").exists(), "Write created a file outside the workspace"
    finally:
        stop.set()
        swapper.join()
    assert reads["inside"] > 0 and reads["refused"] > 0, reads  # the race did happen both ways
    assert (outside / "f.txt").read_text() == "OUTSIDE\n"


def test_a_hard_link_to_an_outside_file_is_neither_read_nor_overwritten(
    ctx: ToolContext, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("do not read me\n")
    os.link(secret, ctx.workspace / "innocent.txt")
    out, error = call(ctx, "Read", path="innocent.txt")
    assert error and "hard links" in out and "do not read me" not in out
    out, error = call(ctx, "Write", path="innocent.txt", content="overwritten")
    assert error and "hard links" in out
    assert secret.read_text() == "do not read me\n"


def test_a_fifo_is_refused_at_once(ctx: ToolContext) -> None:
    os.mkfifo(ctx.workspace / "pipe")
    answers: list[tuple[str, bool]] = []
    reader = threading.Thread(target=lambda: answers.append(call(ctx, "Read", path="pipe")), daemon=True)
    reader.start()
    reader.join(10)
    assert not reader.is_alive(), "Read hung on a FIFO"
    [(out, error)] = answers
    assert error and "FIFO" in out
    out, error = call(ctx, "Write", path="pipe", content="x")  # no reader: refused, never blocks
    assert error


def test_symlinks_within_the_workspace_still_work(ctx: ToolContext) -> None:
    (ctx.workspace / "docs").mkdir()
    (ctx.workspace / "docs" / "guide.md").write_text("# guide\n")
    (ctx.workspace / "d").symlink_to("docs")
    (ctx.workspace / "d2").symlink_to(ctx.workspace / "docs")  # absolute, inside
    assert "# guide" in call(ctx, "Read", path="d/guide.md")[0]
    assert "# guide" in call(ctx, "Read", path="d2/../d/./guide.md")[0]
    _, error = call(ctx, "Write", path="d/new/notes.md", content="n")
    assert not error and (ctx.workspace / "docs" / "new" / "notes.md").read_text() == "n"


@pytest.mark.processes
def test_read_reads_only_what_it_returns(tmp_path: Path) -> None:
    """A 1 GiB file: Read returns its first lines with the memory of a few lines (it used
    to read the whole file first). Measured in a fresh process: its peak RSS."""
    big = tmp_path / "ws" / "big.log"
    big.parent.mkdir()
    with open(big, "wb") as handle:
        handle.write(b"line\n" * 10_000)  # the first 8 KiB are text
        handle.truncate(1 << 30)  # sparse: costs no disk
    script = (
        "import resource, sys\n"
        "from pathlib import Path\n"
        "from daemon.tools.files import ReadInput, read_file\n"
        "from daemon.tools import ToolContext\n"
        "ctx = ToolContext('s', 1, Path(sys.argv[1]), None, None, None)\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "out = read_file(ReadInput(path='big.log', limit=10), ctx).text\n"
        "after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "print(after - before, out.count('\\tline'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(big.parent)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    grown_kib, lines = map(int, done.stdout.split())
    assert lines == 10
    assert grown_kib < 50 * 1024, f"Read grew the process by {grown_kib} KiB"


def test_an_overlong_line_is_cut_not_loaded(ctx: ToolContext) -> None:
    (ctx.workspace / "one.txt").write_bytes(b"x" * 5_000_000 + b"\nsecond\n")
    out, error = call(ctx, "Read", path="one.txt")
    assert not error and "[... line cut ...]" in out and "second" in out and len(out) < 120_000
