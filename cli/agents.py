"""`worktrain mcp`: the door for coordinating agents (README's worktrain command). The command is light; the
MCP SDK is imported only when it runs (cli/mcpserver.py), so other commands stay fast."""

from __future__ import annotations

import logging

import click

from cli.client import resolve_url, up_token
from cli.common import TOKEN_FILE_HELP, TOKEN_HELP, URL_HELP, read_token


@click.command("mcp", short_help="An MCP server on stdio for coordinating agents.")
@click.option("--url", envvar="WORKTRAIN_URL", metavar="URL", help=URL_HELP)
@click.option("--token", envvar="WORKTRAIN_API_TOKEN", metavar="TOKEN", help=TOKEN_HELP)
@click.option("--token-file", envvar="WORKTRAIN_API_TOKEN_FILE", metavar="PATH", help=TOKEN_FILE_HELP)
def mcp_command(url: str | None, token: str | None, token_file: str | None) -> None:
    """Serve WorkTrain's tools over the Model Context Protocol on stdin/stdout: dispatch,
    steer (expectedTurnId, clientMsgId, mode, wait for the receipt), get_steer, get_session,
    list_sessions, list_steers, retract_steer, edit_steer, get_events, get_issues, cancel,
    list_workflows, get_signals (what agents tell their coordinator), reply (answer a
    question) and fork (try again from one of a session's turns). Add it to Claude Code
    with: claude mcp add worktrain -- worktrain mcp
    """
    from daemon.host.secrets import API_TOKEN, seal

    # First: the token leaves this process's environment (it re-executes itself, as `web`
    # and `up` do), so an agent that can read /proc/<pid>/environ does not find it there.
    held = seal("mcp")
    from cli.mcpserver import serve

    logging.basicConfig(level=logging.WARNING)  # to stderr: stdout carries the protocol
    base_url = resolve_url(url)
    serve(base_url, read_token(held.get(API_TOKEN) or token, token_file) or up_token(base_url))
