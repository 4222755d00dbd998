"""Issue 29, item 12: `worktrain console` put the signed-in link — the API token in its
fragment — on the browser's command line, which every local user reads (`ps`,
`/proc/<pid>/cmdline`). Now the browser gets an owner-only page that sends it on.

The "browser" here is a program named by `BROWSER` (how Python's webbrowser picks one):
it records its own command line as `ps` would show it and, where Chromium is installed,
loads what it was given in headless Chromium and prints the DOM it ended up on, proving
the page leads to the console signed-in link."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from cli.console import STALE_SECONDS, redirect_page
from tests.cli.conftest import TOKEN, Cli

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FAKE_BROWSER = """#!{python}
import os, subprocess, sys
with open(os.path.join(os.environ["RECORD_DIR"], "argv"), "wb") as out:
    out.write(open(f"/proc/{{os.getpid()}}/cmdline", "rb").read())
target = sys.argv[1]
if os.path.exists({chromium!r}):
    dom = subprocess.run(
        [{chromium!r}, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=3000",
         "--dump-dom", target], capture_output=True, timeout=60,
    ).stdout
    open(os.path.join(os.environ["RECORD_DIR"], "dom"), "wb").write(dom)
"""


def test_the_browser_is_never_given_the_token(cli: Cli, tmp_path: Path) -> None:
    record = tmp_path / "record"
    record.mkdir()
    browser = tmp_path / "browser"
    browser.write_text(FAKE_BROWSER.format(python=sys.executable, chromium=CHROMIUM))
    browser.chmod(0o755)
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    env = {
        **os.environ, "WORKTRAIN_URL": cli.url, "WORKTRAIN_API_TOKEN": TOKEN, "PYTHONPATH": str(ROOT),
        "BROWSER": f"{browser} %s", "RECORD_DIR": str(record), "XDG_RUNTIME_DIR": str(runtime),
    }  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "cli", "console"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{cli.url}/#token={TOKEN}"  # the terminal still shows the link
    argv = (record / "argv").read_bytes()
    assert TOKEN.encode() not in argv, argv
    given = argv.rstrip(b"\0").split(b"\0")[-1].decode()
    assert given.startswith("file://"), given
    page = Path(given.removeprefix("file://"))
    assert stat.S_IMODE(page.stat().st_mode) == 0o600 and stat.S_IMODE(page.parent.stat().st_mode) == 0o700
    assert page.parent == runtime / "worktrain"
    if os.path.exists(CHROMIUM):
        dom = (record / "dom").read_text()
        # the page led to the console, signed in (else its title is "Sign in · WorkTrain")
        assert "<title>Sessions · WorkTrain</title>" in dom, dom[:2000]


def test_stale_pages_are_removed_by_the_next_run(tmp_path: Path) -> None:
    first = redirect_page("http://127.0.0.1:1/#token=abc", tmp_path, now=1000.0)
    os.utime(first, (1000.0, 1000.0))
    second = redirect_page("http://127.0.0.1:1/#token=abc", tmp_path, now=1000.0 + STALE_SECONDS + 1)
    assert not first.exists() and second.exists()
    assert 'location.replace("http://127.0.0.1:1/#token=abc")' in second.read_text()


@pytest.mark.parametrize("link", ['http://x/#token=a"b</script>'])
def test_a_link_cannot_break_out_of_the_page(tmp_path: Path, link: str) -> None:
    text = redirect_page(link, tmp_path).read_text()
    assert "</script>" not in text.split("<script>", 1)[1].split("</script>", 1)[0]
