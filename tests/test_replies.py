"""Every Lua script's reply parsed once into a typed value (issue 42, daemon/bus/replies.py).

Held here: no reply read by position in the bus or the worker outside the decoder module;
no script run except through daemon/bus/scripts.py (so through its decoder); every script
declared there once, with a decoder that quotes its header's `Returns` line, fenced exactly
when its Lua calls `fence()`; and each decoder on each shape its script answers.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import re
import sys
from collections.abc import Callable
from typing import Any

import fakeredis
import pytest

from daemon.bus import replies, scripts
from daemon.bus.replies import (
    Accepted,
    CancelAnswer,
    CancelRequested,
    Changed,
    Claim,
    ClaimRefusal,
    FenceRefusal,
    LeaseCheck,
    PollLease,
    Reaped,
    Receipt,
    SignalStored,
    SlotAnswer,
    SteerChange,
    SteerOutcome,
    Taken,
    TurnStart,
    UnexpectedReply,
)
from daemon.bus.scripts import ALL_SCRIPTS, WORKER_SCRIPTS, LuaScript, Registered, WorkerScript
from daemon.schema.records import PendingSteer
from tests.test_layers import ROOT, product_files

pytestmark = pytest.mark.unit  # the tier (tests/tiers.py on the tiers branch)

LUA = ROOT / "daemon" / "bus" / "lua"
DECODERS = "daemon/bus/replies.py"
# where Redis replies are read: the bus and the RQ shell
SCANNED = ("daemon/bus/", "worker/")
# calls whose result may be read by position: text cut up, and the builtins (`str(x)[:100]`);
# any other call's result there is taken for a Redis reply (a command, `execute()`, a script)
STR_METHODS = set(dir(str))
BUILTINS = set(dir(builtins))


# --- no reply read by position ----------------------------------------------------------


def _constant_position(node: ast.Subscript) -> bool:
    index = node.slice
    if isinstance(index, ast.UnaryOp) and isinstance(index.op, ast.USub):
        index = index.operand
    return isinstance(index, ast.Constant) and isinstance(index.value, int)


def _replying_call(node: ast.expr) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr not in STR_METHODS
    return isinstance(func, ast.Name) and func.id not in BUILTINS


def positional_reads(source: str, where: str) -> list[str]:
    """Replies read by position: `reply[0]`, `replies[3 * i : 3 * i + 3]`, `pipe.execute()[1]`,
    `self._fenced("release")[1]`, `reply[0][1]`, `entries[-1][0]`."""
    found: list[tuple[int, int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Subscript):
            continue
        base = node.value
        name = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else ""
        by_position = _constant_position(node) or isinstance(node.slice, ast.Slice)
        if (
            "repl" in name.lower()
            or (by_position and _replying_call(base))
            or (_constant_position(node) and isinstance(base, ast.Subscript) and _constant_position(base))
        ):
            found.append((node.lineno, node.col_offset, ast.unparse(node)))
    return [f"{where}:{line}: {text}" for line, _, text in sorted(found)]


def scanned_files() -> list[tuple[str, str]]:
    files = []
    for path in product_files():
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(SCANNED) and rel != DECODERS:
            files.append((rel, path.read_text()))
    return files


def test_no_reply_is_read_by_position_outside_the_decoders() -> None:
    found = [read for rel, source in scanned_files() for read in positional_reads(source, rel)]
    print(f"{len(found)} positional reply reads outside {DECODERS}")
    assert found == [], "decode the reply once in daemon/bus/replies.py:\n" + "\n".join(found)


def test_the_positional_check_catches_what_it_is_for() -> None:
    source = """
status = as_text(reply[0])
rest = reply[1:]
group = replies[3 * i : 3 * i + 3]
number = int(self._fenced("release")[1])
confirmed = pipe.execute()[1]
entries = answer[0][1]
cursor = entries[-1][0]
held = self._acquire(keys=k, args=a)[0]
first = client.xrevrange(key, count=1)[0]
ms = text.split("-", 1)[0]
head = str(value)[:100]
item = items[i][1]
"""
    found = positional_reads(source, "x.py")
    assert [line.split(": ", 1)[1] for line in found] == [
        "reply[0]",
        "reply[1:]",
        "replies[3 * i:3 * i + 3]",
        "self._fenced('release')[1]",
        "pipe.execute()[1]",
        "answer[0][1]",
        "entries[-1][0]",
        "self._acquire(keys=k, args=a)[0]",
        "client.xrevrange(key, count=1)[0]",
    ]


def test_the_brief_grep_finds_no_reply_read_by_position_in_the_bus() -> None:
    """`grep -n "reply\\[" daemon/bus/*.py` outside the decoders (issue 42's count)."""
    hits = [
        f"{path.name}:{number}"
        for path in sorted((ROOT / "daemon" / "bus").glob("*.py"))
        if path.relative_to(ROOT).as_posix() != DECODERS
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "reply[" in line
    ]
    assert hits == []


def test_scripts_run_only_through_their_declaration() -> None:
    """No EVAL, EVALSHA, SCRIPT LOAD or redis-py Script outside daemon/bus/scripts.py: every
    script's reply reaches its caller through its decoder."""
    found = []
    for path in product_files():
        rel = path.relative_to(ROOT).as_posix()
        if rel == "daemon/bus/scripts.py":
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in (
                "register_script",
                "evalsha",
                "eval",
                "script_load",
                "eval_ro",
                "evalsha_ro",
                "fcall",
            ):
                found.append(f"{rel}:{node.lineno}: .{node.attr}")
            if isinstance(node, ast.ImportFrom) and node.module == "redis.commands.core":
                found.append(f"{rel}:{node.lineno}: from redis.commands.core import ...")
    assert found == []


# --- every script declared once, its decoder agreeing with its header --------------------


def returns_line(name: str) -> str:
    """The `-- Returns ...` text of a script's header with its continuation lines, on one line."""
    lines = (LUA / f"{name}.lua").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("-- Returns"))
    text = [lines[start].removeprefix("-- Returns")]
    for line in lines[start + 1 :]:
        if not re.match(r"--\s{2,}\S", line):
            break
        text.append(line.removeprefix("--"))
    return " ".join(" ".join(text).split())


def shapes(text: str) -> list[str]:
    return re.findall(r"\{[^{}]*\}", text)


def decoder_doc(decode: Callable[[Any], Any]) -> str:
    """The decoder's docstring, and its class's when it is a method (`Claim.decode`)."""
    docs = [inspect.getdoc(decode) or ""]
    owner, _, _ = decode.__qualname__.rpartition(".")
    if owner:
        docs.append(inspect.getdoc(getattr(sys.modules[decode.__module__], owner)) or "")
    return " ".join(" ".join(docs).replace("`", " ").split())


FENCED = "{'fenced', reason}"


def test_every_lua_script_is_declared_once_with_a_decoder() -> None:
    files = sorted(path.stem for path in LUA.glob("*.lua") if not path.name.startswith("_"))
    names = [script.name for script in ALL_SCRIPTS]
    assert sorted(names) == files and len(set(names)) == len(names)
    for script in ALL_SCRIPTS:
        assert script.prelude is None or (LUA / script.prelude).is_file()
        assert callable(script.decode) and script.decode.__module__ == replies.__name__, script.name
        assert scripts.BY_NAME[script.name] is script


@pytest.mark.parametrize("script", ALL_SCRIPTS, ids=lambda script: script.name)
def test_the_decoder_quotes_its_scripts_returns_line(script: LuaScript[Any]) -> None:
    """Each reply shape of the header's `Returns` line is quoted by the decoder (the fence's
    refusal by the worker-side wrapper), and the decoder names the script: change one, and
    this test sends you to the other."""
    returns = returns_line(script.name)
    doc = decoder_doc(script.decode)
    assert f"{script.name}.lua" in doc
    for shape in shapes(returns):
        if shape == FENCED:
            continue
        assert shape in doc, f"{script.name}.lua returns {shape}; its decoder does not say so:\n{doc}"
    assert (FENCED in shapes(returns)) == isinstance(script, WorkerScript), returns


def test_a_script_is_fenced_exactly_when_its_lua_calls_the_fence() -> None:
    own = {script.name: (LUA / f"{script.name}.lua").read_text() for script in ALL_SCRIPTS}
    calls_fence = sorted(name for name, source in own.items() if re.search(r"\bfence\(\)", source))
    assert sorted(script.name for script in WORKER_SCRIPTS) == calls_fence
    assert all(isinstance(script, WorkerScript) for script in WORKER_SCRIPTS)


# --- each decoder on each shape ---------------------------------------------------------

STEER = PendingSteer(offset=3, text="hi", turnId=2, acceptedAt="2025-01-01T00:00:00Z").model_dump_json()
RECEIPT = '{"turnId": 4, "offsets": [1, 2]}'

DECODED: list[tuple[LuaScript[Any], list[Any] | int, Any]] = [
    (scripts.ACCEPT, ["accepted", 2, 7], Accepted(SteerOutcome.ACCEPTED, turn=2, offset=7)),
    (scripts.ACCEPT, [b"duplicate", 2, 5], Accepted(SteerOutcome.DUPLICATE, turn=2, offset=5)),
    (scripts.ACCEPT, ["stale_turn", 9], Accepted(SteerOutcome.STALE_TURN, live_turn=9)),
    (
        scripts.ACCEPT,
        ["too_many_pending_steers", 50],
        Accepted(SteerOutcome.TOO_MANY_PENDING_STEERS, max_pending=50),
    ),
    (scripts.ACCEPT, ["not_found"], Accepted(SteerOutcome.NOT_FOUND)),
    (scripts.ACCEPT, ["client_msg_id_reuse"], Accepted(SteerOutcome.CLIENT_MSG_ID_REUSE)),
    (scripts.ACCEPT, ["no_live_turn"], Accepted(SteerOutcome.NO_LIVE_TURN)),
    (scripts.RETRACT, ["retracted", "old"], Changed(SteerChange.RETRACTED, "old")),
    (scripts.RETRACT, ["not_pending"], Changed(SteerChange.NOT_PENDING)),
    (scripts.EDIT, [b"edited", b"before"], Changed(SteerChange.EDITED, "before")),
    (scripts.EDIT, ["too_many_edits"], Changed(SteerChange.TOO_MANY_EDITS)),
    (scripts.EDIT, ["steer_not_found"], Changed(SteerChange.STEER_NOT_FOUND)),
    (scripts.CANCEL, ["cancelled", 4, 5], CancelAnswer("cancelled", [4, 5])),
    (scripts.CANCEL, ["requested"], CancelAnswer("requested")),
    (scripts.CANCEL, ["finished"], CancelAnswer("finished")),
    (scripts.CANCEL, ["not_found"], CancelAnswer("not_found")),
    (scripts.REAP, ["requeued", 3], Reaped("requeued", 3)),
    (scripts.REAP, ["watching"], Reaped("watching")),
    (scripts.REAP, ["changed"], Reaped("changed")),
    (
        scripts.CLAIM,
        ["ok", 2, 6, "1", "0", RECEIPT, STEER],
        Claim(2, 6, True, False, [PendingSteer.model_validate_json(STEER)], Receipt(4, [1, 2])),
    ),
    (scripts.CLAIM, ["ok", 1, 0, "0", "1", ""], Claim(1, 0, False, True)),
    (scripts.CLAIM, ["leased", "w9"], ClaimRefusal("leased", "w9")),
    (scripts.CLAIM, ["finished"], ClaimRefusal("finished")),
    (
        scripts.TURN_STARTED,
        ["ok", 3, "[1]", "[2]", STEER],
        TurnStart(3, [PendingSteer.model_validate_json(STEER)], [1], [2]),
    ),
    (scripts.TURN_STARTED, ["cancelled"], CancelRequested()),
    (scripts.TURN_STARTED, ["fenced", "stale_attempt"], FenceRefusal("stale_attempt")),
    (scripts.TURN_ENDED, ["ok", STEER], [PendingSteer.model_validate_json(STEER)]),
    (scripts.TURN_ENDED, ["ok"], []),
    (scripts.TAKE, ["ok", "1", "5-0"], Taken([], True, "5-0")),
    (scripts.CHECKPOINT, ["ok"], None),
    (scripts.CHECKPOINT, [b"fenced", b"lease_lost"], FenceRefusal("lease_lost")),
    (scripts.FINISH, ["ok", 1, 2], [1, 2]),
    (scripts.FINISH, ["fenced", "finished"], FenceRefusal("finished")),
    (scripts.HEARTBEAT, ["ok", "0", 2, 7], LeaseCheck(False, 2, 7)),
    (scripts.HEARTBEAT, ["ok", "1", 0], LeaseCheck(True, 0, 0)),  # a script loaded before interrupts
    (scripts.RELEASE, ["ok", 4], 4),
    (scripts.MARK_WAITING, ["ok"], None),
    (scripts.EMIT, ["ok"], None),
    (scripts.REQUEST_SENT, ["ok", "[3, 4]"], [3, 4]),
    (scripts.SIGNAL, ["ok", 6, "1-0"], SignalStored(6, "1-0")),
    (scripts.SET_FIELDS, ["fenced", "finished"], FenceRefusal("finished")),
    (scripts.SLOT_ACQUIRE, [1, 0, 0], SlotAnswer(True)),
    (scripts.SLOT_ACQUIRE, [0, 2, 0], SlotAnswer(False, 2, 0)),
    (scripts.SLOT_RELEASE, 1, True),
    (scripts.SLOT_RELEASE, 0, False),
    (scripts.WEBHOOK_CLAIM, [b'{"id": "a"}', '{"id": "b"}'], ['{"id": "a"}', '{"id": "b"}']),
    (scripts.WEBHOOK_SETTLE, ["ok"], True),
    (scripts.WEBHOOK_SETTLE, ["settled"], False),
    (scripts.TRIGGER_LEASE, [1, "me"], PollLease(True, "me")),
    (scripts.TRIGGER_LEASE, [0, "other"], PollLease(False, "other")),
    (scripts.TRIGGER_RELEASE, 1, True),
    (scripts.TRIGGER_POLLED, ["ok"], True),
    (scripts.TRIGGER_POLLED, ["fenced", ""], False),
    (scripts.TRIGGER_RECORD, ["recorded"], None),
    (scripts.TRIGGER_RECORD, ["duplicate", '{"at": "x"}'], '{"at": "x"}'),
    (scripts.GIVE_BACK, 0, False),
]


@pytest.mark.parametrize(("script", "raw", "decoded"), DECODED, ids=lambda v: getattr(v, "name", None))
def test_each_decoder_reads_each_shape(script: LuaScript[Any], raw: Any, decoded: Any) -> None:
    assert script.decode(raw) == decoded


def test_every_script_has_its_shapes_decoded_above() -> None:
    assert {script.name for script, _, _ in DECODED} == {script.name for script in ALL_SCRIPTS}


@pytest.mark.parametrize(
    ("script", "raw"),
    [
        (scripts.ACCEPT, ["accepted_maybe", 1, 2]),
        (scripts.RETRACT, ["gone"]),
        (scripts.CANCEL, ["halted"]),
        (scripts.REAP, ["reaped", 1]),
        (scripts.CLAIM, ["taken"]),
        (scripts.TURN_STARTED, ["started", 1]),
        (scripts.CHECKPOINT, ["done"]),
        (scripts.FINISH, ["finished", 1]),
        (scripts.WEBHOOK_SETTLE, ["retry"]),
        (scripts.TRIGGER_RECORD, ["kept"]),
        (scripts.GIVE_BACK, 2),
    ],
    ids=lambda v: getattr(v, "name", None),
)
def test_a_shape_no_decoder_knows_is_an_error_not_a_guess(script: LuaScript[Any], raw: Any) -> None:
    with pytest.raises(UnexpectedReply):
        script.decode(raw)


def test_fleet_scripts_answer_their_typed_values_from_real_lua() -> None:
    """Run on fakeredis's Lua: what the scripts really send is what the decoders read."""
    client = fakeredis.FakeRedis(decode_responses=True)
    lease, release = Registered(scripts.TRIGGER_LEASE, client), Registered(scripts.TRIGGER_RELEASE, client)
    assert lease(["poller"], ["me", 10_000]) == PollLease(True, "me")
    assert lease(["poller"], ["you", 10_000]) == PollLease(False, "me")
    assert release(["poller"], ["you"]) is False and release(["poller"], ["me"]) is True
    give_back = Registered(scripts.GIVE_BACK, client)
    assert give_back(["intermediate", "queue", "rq:job:j1"], ["j1"]) is False  # no such job queued
    settle = Registered(scripts.WEBHOOK_SETTLE, client)
    keys = ["deliveries", "due", "log", "failed"]
    assert settle(keys, ["d1", '{"state": "delivered"}', "delivered", 0]) is False  # never queued
    record = Registered(scripts.TRIGGER_RECORD, client)
    keys = ["delivery", "state", "fires", "queued", "seen"]
    first = '{"at": "t1", "triggerId": "t", "deliveryId": "d", "result": "ignored"}'
    assert record(keys, [first, 60, 10, "t1", "ignored", "", "", 0, ""]) is None
    assert record(keys, ["{}", 60, 10, "t2", "ignored", "", "", 0, ""]) == first


# --- redis-py's replies -------------------------------------------------------------------


def test_stream_and_pipeline_replies_by_name() -> None:
    entries = [("1-0", {"a": "1"}), (b"2-0", {"a": "2"})]
    assert replies.xread_streams(None) == [] and replies.xread_entries([]) == []
    assert replies.xread_streams([(b"s", entries)]) == [("s", entries)]  # RESP2
    assert replies.xread_streams({"s": entries}) == [("s", entries)]  # RESP3
    assert replies.xread_entries([("s", entries)]) == entries
    assert replies.last_entry(entries) == ("2-0", {"a": "2"}) and replies.last_entry([]) is None
    assert replies.last_id(entries) == "2-0" and replies.last_id([]) is None
    assert replies.entry_id(entries[0]) == "1-0"
    assert list(replies.per_item([1, 2, 3, 4, 5, 6], 3)) == [(1, 2, 3), (4, 5, 6)]
    with pytest.raises(UnexpectedReply):
        list(replies.per_item([1, 2], 3))


def test_decoders_module_is_where_the_scan_exempts() -> None:
    """The exemption names a file that exists (a rename would silently exempt nothing)."""
    assert (ROOT / DECODERS).is_file()
