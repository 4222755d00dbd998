"""Issue sinks (each failing alone), the system prompt, and the pure message builders."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from daemon.agent.prompt import BASE_SYSTEM_PROMPT, PromptInputs, build_system_prompt, gather_prompt_inputs
from daemon.bus.keys import Keys
from daemon.bus.streams.issues import IssueSink
from daemon.schema.issues import Issue
from daemon.tools import TOOL_NAMES
from daemon.turn.messages import (
    RESUME_NOTE,
    Message,
    TextBlock,
    ToolResultBlock,
    delivery_text,
    first_message,
    parse_message,
    resumed_history,
    turn_end_message,
)
from web.readers import RedisReader
from web.standalone import JsonlReader

pytestmark = pytest.mark.unit

SID = "sess_01JD0000000000000000000000"


def issue(severity: str = "warn") -> Issue:
    return Issue(kind="tool_failure", severity=severity, summary="git missing", sessionId=SID, turnId=2)  # type: ignore[arg-type]


# --- issues -----------------------------------------------------------------------------------


def test_an_issue_lands_in_the_stream_and_the_jsonl_mirror(redis_client: redis.Redis, tmp_path: Path) -> None:
    keys = Keys("wt")
    sink = IssueSink(redis_client, keys, tmp_path)
    assert sink.record(issue()).stream and sink.record(issue("fatal")).jsonl
    lines = (tmp_path / "issues" / f"{SID}.jsonl").read_text().splitlines()
    assert [json.loads(line)["severity"] for line in lines] == ["warn", "fatal"]
    entries = RedisReader(redis_client, keys).issues_page(SID, "", 100).items  # GET /api/v2/issues
    assert [e["severity"] for e in entries] == ["warn", "fatal"]
    assert entries[0]["turnId"] == 2 and entries[0]["ts"]
    _, fields = redis_client.xrange(keys.issues)[0]  # type: ignore[index]
    assert fields["sessionId"] == SID and fields["summary"] == "git missing"  # redis-cli readable


def test_the_standalone_console_reads_the_issues_where_the_sink_writes_them(tmp_path: Path) -> None:
    assert IssueSink(None, Keys("wt"), tmp_path).record(issue()).jsonl
    for session_id in (SID, None):
        page = JsonlReader(tmp_path).issues_page(session_id, "", 10)
        assert [(i["id"], i["summary"]) for i in page.items] == [(f"{SID}:1", "git missing")]


@pytest.mark.redis
def test_redis_down_still_writes_the_jsonl(tmp_path: Path) -> None:
    down = redis.Redis(port=1, socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0))
    written = IssueSink(down, Keys("wt"), tmp_path).record(issue())
    assert (written.stream, written.jsonl) == (False, True)
    assert (tmp_path / "issues" / f"{SID}.jsonl").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through read-only permissions")
def test_unwritable_data_dir_still_writes_the_stream(fake_redis: redis.Redis, tmp_path: Path) -> None:
    data = tmp_path / "ro"
    data.mkdir()
    data.chmod(0o500)
    try:
        written = IssueSink(fake_redis, Keys("wt"), data).record(issue())
    finally:
        data.chmod(0o700)
    assert (written.stream, written.jsonl) == (True, False)
    assert fake_redis.xlen("wt:issues") == 1


def test_a_data_dir_that_is_a_file_still_writes_the_stream(fake_redis: redis.Redis, tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    written = IssueSink(fake_redis, Keys("wt"), blocker).record(issue())
    assert (written.stream, written.jsonl) == (True, False)


# --- system prompt ----------------------------------------------------------------------------


def test_base_prompt_has_the_contract_sections_and_every_tool() -> None:
    for needed in ("You are WorkRail Auto", "## Your tools", "## Execution contract", "report_issue"):
        assert needed in BASE_SYSTEM_PROMPT
    assert "fail silently" in BASE_SYSTEM_PROMPT.lower()
    tools_section = BASE_SYSTEM_PROMPT.split("## Your tools")[1].split("##")[0]
    for name in TOOL_NAMES:
        assert f"`{name}`" in tools_section


def test_build_system_prompt_is_pure_and_adds_the_session() -> None:
    inputs = PromptInputs(
        SID, "two-step", "Two steps", 2, "find bugs", "/ws", "Be kind.", (("AGENTS.md", "Use uv."),)
    )
    prompt = build_system_prompt(inputs)
    assert prompt == build_system_prompt(inputs)
    assert prompt.startswith(BASE_SYSTEM_PROMPT.rstrip())
    for part in (
        SID,
        "Two steps (two-step)",
        "/ws",
        "find bugs",
        "Be kind.",
        "## Project notes (AGENTS.md)\nUse uv.",
    ):
        assert part in prompt


def test_gather_reads_soul_and_project_notes_capped(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "AGENTS.md").write_text("a" * 20_000)
    (ws / "CLAUDE.md").symlink_to(tmp_path / "secret.md")
    (tmp_path / "secret.md").write_text("do not leak")
    soul = tmp_path / "soul.md"
    soul.write_text("Prefer small diffs.")
    inputs = gather_prompt_inputs(SID, "w", "W", 1, "g", ws, soul)
    assert inputs.soul == "Prefer small diffs."
    [(name, notes)] = inputs.project_notes
    assert name == "AGENTS.md" and len(notes) < 16_100 and "cut at 16000" in notes


# --- messages ---------------------------------------------------------------------------------


def test_delivery_text_is_step_text_then_steers_joined_by_blank_lines() -> None:
    assert delivery_text(["step"], ["a", "b"]) == "step\n\na\n\nb"
    assert delivery_text([], ["a"]) == "a"
    assert delivery_text([], []) is None
    assert first_message("prompt", []).texts == ["prompt"]


def test_turn_end_message_puts_the_text_after_the_tool_results() -> None:
    results = [
        ToolResultBlock(tool_use_id="t1", content="ok"),
        ToolResultBlock(tool_use_id="t2", content="x"),
    ]
    message = turn_end_message(results, ["step 2"], ["steer"])
    assert message is not None
    assert [b.type for b in message.content] == ["tool_result", "tool_result", "text"]
    assert message.content[-1] == TextBlock(text="step 2\n\nsteer")
    assert turn_end_message(results, [], []).content == tuple(results)  # type: ignore[union-attr]
    assert turn_end_message([], [], []) is None


def test_messages_round_trip_through_json_and_accept_wire_shorthand() -> None:
    message = turn_end_message([ToolResultBlock(tool_use_id="t", content="r", is_error=True)], [], ["s"])
    assert message is not None and parse_message(message.to_json()) == message
    wire = {"role": "user", "content": "plain", "extra": 1}
    assert Message.model_validate(wire).texts == ["plain"]
    listed = {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": "a"}]}],
    }
    assert Message.model_validate(listed).content[0].content == "a"  # type: ignore[union-attr]


def test_resumed_history_appends_the_note_and_steers_to_the_last_user_message() -> None:
    history = [first_message("p", []), Message(role="assistant", content=(TextBlock(text="hi"),))]
    tail = turn_end_message([ToolResultBlock(tool_use_id="t", content="r")], ["step"], ["a"])
    assert tail is not None
    keep, replacement = resumed_history([*history, tail], ["b", "c"])
    assert keep == 2
    assert replacement.content[:-1] == tail.content
    assert replacement.content[-1] == TextBlock(text=f"{RESUME_NOTE}\n\nb\n\nc")
    keep, replacement = resumed_history(history, [])
    assert keep == 2 and replacement.role == "user" and replacement.texts == [RESUME_NOTE]


def test_the_dispatch_context_reaches_the_prompt_capped(tmp_path: Path) -> None:
    inputs = gather_prompt_inputs(SID, "w", "W", 1, "g", tmp_path, None, context={"ticket": "BUG-7"})
    assert '- Context: {"ticket": "BUG-7"}' in build_system_prompt(inputs)
    big = gather_prompt_inputs(SID, "w", "W", 1, "g", tmp_path, None, context={"x": "y" * 10_000})
    assert big.context is not None and len(big.context) < 4_100 and big.context.endswith("[... cut ...]")
    assert "Context" not in build_system_prompt(gather_prompt_inputs(SID, "w", "W", 1, "g", tmp_path, None))
