"""Issue 29, item 10: a FIFO in the workflows folder hung the catalog forever, and a symlink
to `/dev/zero` read until memory ran out. Now each is one skipped file with its reason
(daemon/host/safefile.py: non-blocking, regular files only, capped), and the rest loads.

Run in a child process with a memory limit and a timeout: on the code before the fix the
FIFO hangs it and `/dev/zero` exhausts it, and neither must take this test run down."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from daemon.host.safefile import UnsafeFile, first_line, read_regular
from tests.web.conftest import FIXTURE_WORKFLOWS

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
LOAD = """
import json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
from pathlib import Path
from daemon.workflows.catalog import load_catalog
catalog = load_catalog(Path(sys.argv[1]))
print(json.dumps({"workflows": sorted(catalog.workflows), "problems": catalog.problems}))
"""


def _load_in_child(folder: Path) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", LOAD, str(folder)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,  # a hang is a failure (TimeoutExpired), not a stuck test run
    )
    assert done.returncode == 0, done.stderr[-2000:]
    loaded: dict[str, object] = json.loads(done.stdout)
    return loaded


@pytest.mark.processes
def test_a_fifo_and_a_dev_zero_link_are_skipped_and_the_rest_loads(tmp_path: Path) -> None:
    folder = tmp_path / "workflows"
    shutil.copytree(FIXTURE_WORKFLOWS, folder)
    os.mkfifo(folder / "fifo.json")
    (folder / "zero.json").symlink_to("/dev/zero")
    loaded = _load_in_child(folder)
    assert "two-step" in loaded["workflows"], loaded  # type: ignore[operator]
    problems = loaded["problems"]
    assert "a FIFO, not a regular file" in problems["fifo.json"], problems  # type: ignore[index]
    assert "a character device, not a regular file" in problems["zero.json"], problems  # type: ignore[index]


def test_read_regular_caps_and_refuses(tmp_path: Path) -> None:
    (tmp_path / "small").write_bytes(b"ref: refs/heads/main\nmore\n")
    assert first_line(tmp_path / "small") == "ref: refs/heads/main"
    assert read_regular(tmp_path / "small", 4, whole=False) == b"ref:"
    for path, reason in ((tmp_path / "small", "larger than 4 bytes"), (tmp_path, "a directory")):
        try:
            read_regular(path, 4)
        except UnsafeFile as exc:
            assert reason in str(exc)
        else:
            raise AssertionError(f"{path} was read")
    (tmp_path / "link").symlink_to(tmp_path / "small")
    try:
        read_regular(tmp_path / "link", 100, follow=False)
    except OSError as exc:
        assert exc.errno == 40  # ELOOP: the symlink itself is refused
    else:
        raise AssertionError("a symlink was followed with follow=False")
