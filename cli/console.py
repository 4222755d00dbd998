"""`worktrain console`: the browser console, opened signed in (docs/security.md, README's worktrain command).

The link carries the token in its *fragment* (`http://127.0.0.1:3456/#token=...`): a
browser never sends a fragment to a server, so it is in no request line and no log; the
console's script moves it into the tab's sessionStorage and takes it out of the address bar
(web/console/static/js/main.js). The token is the one the other client commands use:
`--token-file`, `--token` / WORKTRAIN_API_TOKEN, else the running `worktrain up`'s own.

The browser is never given the link itself: a program's arguments are world-readable
(`ps`, `/proc/<pid>/cmdline`), so every local user would read the token there (issue 29,
item 12). It is given a file instead — `console-<random>.html`, owner-only, in an
owner-only folder of the user's (`$XDG_RUNTIME_DIR/worktrain`, else
`~/.cache/worktrain`) — whose page sends the browser on to the link, fragment included.
The token is then where it already is (the owner-only `api-token`); such pages older than
`STALE_SECONDS` are removed by the next run (the browser may still be starting when this
one returns, so it cannot remove its own).
"""

from __future__ import annotations

import html
import json
import os
import secrets
import time
import webbrowser
from pathlib import Path
from urllib.parse import quote

import click

from cli.client import resolve_url, up_token
from cli.common import TOKEN_FILE_HELP, TOKEN_HELP, URL_HELP, read_token
from cli.output import say

STALE_SECONDS = 300
PAGE = """<!doctype html>
<meta charset="utf-8">
<meta name="referrer" content="no-referrer">
<meta http-equiv="refresh" content="0;url={attr}">
<title>WorkTrain console</title>
<script>location.replace({js});</script>
<p><a href="{attr}">Open the WorkTrain console</a></p>
"""


def console_link(base_url: str, token: str | None) -> str:
    """The console's address, signed in when there is a token."""
    base = base_url.rstrip("/") + "/"
    return f"{base}#token={quote(token, safe='')}" if token else base


def pages_folder() -> Path:
    """The owner-only folder the redirect pages go in (made 0700 if it is not there)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime) if runtime and os.path.isdir(runtime) else Path.home() / ".cache"
    folder = base / "worktrain"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    return folder


def redirect_page(link: str, folder: Path | None = None, now: float | None = None) -> Path:
    """A new owner-only page that sends the browser on to `link`; stale ones removed."""
    folder = folder or pages_folder()
    now = time.time() if now is None else now
    for old in folder.glob("console-*.html"):
        try:
            if now - old.stat().st_mtime > STALE_SECONDS:
                old.unlink()
        except OSError as exc:
            say(f"worktrain: could not remove {old}: {exc.strerror}", err=True)
    path = folder / f"console-{secrets.token_hex(8)}.html"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as page:
        page.write(PAGE.format(attr=html.escape(link, quote=True), js=json.dumps(link).replace("</", "<\\/")))
    return path


@click.command("console", short_help="Open the web console, signed in.")
@click.option("--url", envvar="WORKTRAIN_URL", metavar="URL", help=URL_HELP)
@click.option("--token", envvar="WORKTRAIN_API_TOKEN", metavar="TOKEN", help=TOKEN_HELP)
@click.option("--token-file", envvar="WORKTRAIN_API_TOKEN_FILE", metavar="PATH", help=TOKEN_FILE_HELP)
@click.option("--print", "print_only", is_flag=True, help="Print the link only; open no browser.")
def console_command(url: str | None, token: str | None, token_file: str | None, print_only: bool) -> None:
    """Print the console's link, signed in (the token rides in the URL fragment, which no
    server or log ever sees), and open it in a browser unless --print (through an
    owner-only page: a browser's arguments are visible to every local user)."""
    base_url = resolve_url(url)
    link = console_link(base_url, read_token(token, token_file) or up_token(base_url))
    say(link)
    if print_only:
        return
    opened = redirect_page(link).as_uri() if "#token=" in link else link  # never the token in argv
    if not webbrowser.open(opened):
        say("worktrain: no browser found here; open the link above in yours.", err=True)
