"""What every client command shares: `--url`, `--token`, `--json`, `--timeout`, error exits.

A client command is a plain function taking a `Call` first; `client_command` turns it into
a click command that builds the HTTP client, maps an `ApiError` to its exit code (one clear
line on stderr; with `--json`, the server's JSON error body on stdout) and treats Ctrl-C as
a quiet, successful exit (for `--follow`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

from cli.client import (
    EXIT_CODES_HELP,
    SESSION_ID_RE,
    WAIT_EXIT_CODES_HELP,
    ApiError,
    Client,
    resolve_url,
    up_token,
)
from cli.output import error_line, print_json


@dataclass
class Call:
    """One command invocation: the client and how to print."""

    client: Client
    as_json: bool


def session_id_arg(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Validate a session id locally: a malformed one is a usage error, never a request."""
    if value is None or SESSION_ID_RE.fullmatch(value):
        return value
    raise click.BadParameter(f"{value[:80]!r} is not a session id (sess_ followed by 26 characters)")


def fail(exc: ApiError, as_json: bool) -> None:
    if as_json:
        print_json(exc.json_body())
    error_line(str(exc))
    raise SystemExit(int(exc.exit_code))


URL_HELP = "WorkTrain API base URL [env WORKTRAIN_URL; default: the running `worktrain up`, else http://127.0.0.1:3456]."
TOKEN_HELP = "Bearer token [env WORKTRAIN_API_TOKEN]; shows in `ps`: prefer --token-file."
TOKEN_FILE_HELP = "Read the bearer token from this file [env WORKTRAIN_API_TOKEN_FILE]."


def read_token(token: str | None, token_file: str | None) -> str | None:
    """The token to send: from `--token-file` when given (it wins over WORKTRAIN_API_TOKEN:
    whoever names a file means it), else `--token` / WORKTRAIN_API_TOKEN."""
    if token_file:
        try:
            with open(token_file, encoding="utf-8") as handle:
                value = handle.read().strip()
        except OSError as exc:
            raise click.BadParameter(
                f"cannot read {token_file}: {exc.strerror}", param_hint="--token-file"
            ) from None
        if not value:
            raise click.BadParameter(f"{token_file} is empty", param_hint="--token-file")
        return value
    return token or None


def shared_options(follows: bool) -> list[click.Option]:
    """The options every client command shares, listed after its own in `--help`."""
    return [
        click.Option(["--url"], envvar="WORKTRAIN_URL", metavar="URL", help=URL_HELP),
        click.Option(["--token"], envvar="WORKTRAIN_API_TOKEN", metavar="TOKEN", help=TOKEN_HELP),
        click.Option(
            ["--token-file"], envvar="WORKTRAIN_API_TOKEN_FILE", metavar="PATH", help=TOKEN_FILE_HELP
        ),
        click.Option(
            ["--json", "as_json"],
            is_flag=True,
            help="Print the server's JSON" + (" (JSON Lines when following)." if follows else "."),
        ),
        click.Option(["--timeout"], type=float, default=10.0, show_default=True, help="Seconds per request."),
    ]


def client_command(
    name: str, short_help: str | None = None, *, follows: bool = False, waits: bool = False
) -> Callable[[Callable[..., None]], click.Command]:
    """Decorate `fn(call, **params)` (its click arguments and options, its docstring) into the
    client command `name` (`follows`: it has a --follow that prints JSON Lines; `waits`: its
    --wait has exit codes 10 and 11)."""

    def decorate(fn: Callable[..., None]) -> click.Command:
        own = click.command(name)(fn)  # click collects fn's decorated parameters and help

        @functools.wraps(fn)
        def run(
            url: str | None,
            token: str | None,
            token_file: str | None,
            as_json: bool,
            timeout: float,
            **params: Any,
        ) -> None:
            try:
                base_url = resolve_url(url)
                client = Client(base_url, read_token(token, token_file) or up_token(base_url), timeout)
            except ApiError as exc:
                fail(exc, as_json)
                return
            try:
                fn(Call(client, as_json), **params)
            except ApiError as exc:
                fail(exc, as_json)
            except KeyboardInterrupt:
                raise SystemExit(0) from None
            finally:
                client.close()

        return click.Command(
            name,
            callback=run,
            params=[*own.params, *shared_options(follows)],
            help=own.help,
            short_help=short_help,
            epilog=WAIT_EXIT_CODES_HELP if waits else EXIT_CODES_HELP,
        )

    return decorate
