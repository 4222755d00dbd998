"""`worktrain console`: the browser console, opened signed in (SPEC §3.4 v3, §7).

The link carries the token in its *fragment* (`http://127.0.0.1:3456/#token=...`): a
browser never sends a fragment to a server, so it is in no request line and no log; the
console's script moves it into the tab's sessionStorage and takes it out of the address bar
(web/console/static/js/main.js). The token is the one the other client commands use:
`--token-file`, `--token` / WORKTRAIN_API_TOKEN, else the running `worktrain up`'s own.
"""

from __future__ import annotations

import webbrowser
from urllib.parse import quote

import click

from cli.client import resolve_url, up_token
from cli.common import TOKEN_FILE_HELP, TOKEN_HELP, URL_HELP, read_token


def console_link(base_url: str, token: str | None) -> str:
    """The console's address, signed in when there is a token."""
    base = base_url.rstrip("/") + "/"
    return f"{base}#token={quote(token, safe='')}" if token else base


@click.command("console", short_help="Open the web console, signed in.")
@click.option("--url", envvar="WORKTRAIN_URL", metavar="URL", help=URL_HELP)
@click.option("--token", envvar="WORKTRAIN_API_TOKEN", metavar="TOKEN", help=TOKEN_HELP)
@click.option("--token-file", envvar="WORKTRAIN_API_TOKEN_FILE", metavar="PATH", help=TOKEN_FILE_HELP)
@click.option("--print", "print_only", is_flag=True, help="Print the link only; open no browser.")
def console_command(url: str | None, token: str | None, token_file: str | None, print_only: bool) -> None:
    """Print the console's link, signed in (the token rides in the URL fragment, which no
    server or log ever sees), and open it in a browser unless --print."""
    base_url = resolve_url(url)
    link = console_link(base_url, read_token(token, token_file) or up_token(base_url))
    click.echo(link)
    if not print_only and not webbrowser.open(link):
        click.echo("worktrain: no browser found here; open the link above in yours.", err=True)
