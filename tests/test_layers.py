"""The layering of the product, held by a test (docs/DEVELOPING.md has the map).

Every import of every product module — at the top, inside a function, under
TYPE_CHECKING — is an arrow. The arrows between `daemon`'s subpackages must point down
the layers below; `daemon` imports nothing of `web`, `worker`, `cli`; and no set of
modules imports itself round (no cycles, checked file by file across the product).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("daemon", "web", "worker", "cli")

# What each subpackage of `daemon` may import (besides itself). The bottom layer first.
ALLOWED: dict[str, set[str]] = {
    "host": set(),
    "turn": set(),
    "workflows": {"host"},  # the catalog reads its folder through host/safefile.py (issue 29)
    "schema": {"host", "workflows"},  # records, events, webhook payloads: the shared vocabulary
    "fakemodel": {
        "host",
        "turn",
        "workflows",
        "schema",
        "agent",
    },  # a double of the model API, for tests and the demo
    "bus": {"host", "turn", "workflows", "schema"},
    "sandbox": {"host"},
    "tools": {"host", "turn", "workflows", "schema", "bus", "sandbox"},
    "agent": {"host", "turn", "workflows", "schema", "bus", "sandbox", "tools"},
    "session": {
        "host",
        "turn",
        "workflows",
        "schema",
        "bus",
        "sandbox",
        "tools",
        "agent",
        "workspaces",
        "forking",
    },
    "forking": {"host", "turn", "workflows", "schema", "bus"},  # forks (README's Fork a session)
    "workspaces": {
        "host",
        "schema",
        "bus",
    },  # a session's worktree and the delivery of its work (README's Coding sessions)
    "webhooks": {"host", "schema", "bus"},  # the webhook sender (README's Webhooks)
    # README's Triggers: the file, templates, providers, fires, polls; the sender's comment poster
    "triggers": {"host", "schema", "bus", "workflows", "sandbox", "webhooks"},
}
# Modules allowed directly under daemon/ (cross-cutting ones would be listed here).
TOP_LEVEL = {"daemon/__init__.py"}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def product_files() -> Iterator[Path]:
    for top in PRODUCT:
        yield from sorted((ROOT / top).rglob("*.py"))


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The product modules `path` imports (a `from pkg import mod` names the module)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {m for m in found if m in modules and m != name}


def graph() -> dict[str, set[str]]:
    files = list(product_files())
    modules = {module_name(f) for f in files}
    return {module_name(f): imports_of(f, modules) for f in files}


def layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "daemon" and len(parts) > 1 else None


def upward_imports(arrows: dict[str, set[str]]) -> list[str]:
    wrong = []
    for source, targets in arrows.items():
        for target in targets:
            top, below = source.split(".")[0], target.split(".")[0]
            if top == "daemon" and below != "daemon":
                wrong.append(f"{source} -> {target}: daemon imports nothing of web, worker, cli")
                continue
            mine, theirs = layer(source), layer(target)
            if mine and theirs and mine != theirs and theirs not in ALLOWED[mine]:
                wrong.append(f"{source} -> {target}: {mine} may import only {sorted(ALLOWED[mine])}")
    return sorted(wrong)


def cycles(arrows: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(arrows):
        if root in index:
            continue
        work = [(root, iter(sorted(arrows[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(arrows.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def test_every_daemon_subpackage_has_a_layer() -> None:
    packages = {p.parent.name for p in (ROOT / "daemon").glob("*/__init__.py")}
    assert packages - {"lua"} <= set(ALLOWED), f"add {packages - set(ALLOWED)} to ALLOWED"


def test_no_module_sits_loose_directly_under_daemon() -> None:
    loose = {str(p.relative_to(ROOT)) for p in (ROOT / "daemon").glob("*.py")} - TOP_LEVEL
    assert not loose, f"put these in the subpackage that owns them: {sorted(loose)}"


def test_subpackage_docstrings_say_what_they_own_and_may_import() -> None:
    for init in (ROOT / "daemon").glob("*/__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert "May import" in doc, f"{init.relative_to(ROOT)}: say what it owns and may import"


def test_lower_layers_never_import_higher_ones() -> None:
    assert upward_imports(graph()) == []


def test_no_import_cycles_in_the_product() -> None:
    assert cycles(graph()) == []


def test_the_checks_catch_what_they_are_for() -> None:
    """The checks themselves: an upward arrow and a two-file cycle are each reported."""
    arrows = {"daemon.bus.keys": {"daemon.agent.loop"}, "daemon.agent.loop": {"daemon.bus.keys"}}
    assert upward_imports(arrows) == [
        "daemon.bus.keys -> daemon.agent.loop: bus may import only ['host', 'schema', 'turn', 'workflows']"
    ]
    assert cycles(arrows) == [["daemon.agent.loop", "daemon.bus.keys"]]
    assert upward_imports({"daemon.host.config": {"web.app"}}) != []


# --- Redis only behind the bus (issue 42) ----------------------------------------------------------

# redis-py's command methods: a call of one on a connection is a Redis command
REDIS_COMMANDS = frozenset(
    [
        "get",
        "set",
        "mget",
        "mset",
        "getdel",
        "hget",
        "hgetall",
        "hset",
        "hmget",
        "hdel",
        "hincrby",
        "hexists",
        "hlen",
        "hkeys",
        "xread",
        "xreadgroup",
        "xrange",
        "xrevrange",
        "xadd",
        "xlen",
        "xtrim",
        "xdel",
        "xinfo_stream",
        "zcard",
        "zrange",
        "zrangebyscore",
        "zrevrange",
        "zscore",
        "zadd",
        "zrem",
        "zcount",
        "zpopmin",
        "llen",
        "lrange",
        "lindex",
        "lpush",
        "rpush",
        "lpop",
        "rpop",
        "blpop",
        "blmove",
        "lmove",
        "lrem",
        "ltrim",
        "exists",
        "delete",
        "unlink",
        "expire",
        "pexpire",
        "persist",
        "ttl",
        "pttl",
        "scan",
        "scan_iter",
        "keys",
        "smembers",
        "sismember",
        "sadd",
        "srem",
        "scard",
        "incr",
        "incrby",
        "decr",
        "publish",
        "pubsub",
        "eval",
        "evalsha",
        "script_load",
        "ping",
        "info",
        "execute_command",
        "pipeline",
        "transaction",
        "watch",
        "multi",
        "exec",
        "type",
        "dbsize",
        "config_get",
        "config_set",
        "wait",
        "role",
        "client_list",
        "client_kill",
    ]
)
# who may send them: the bus, the RQ shell, and the connection plumbing of host/; the CLI speaks
# only HTTP (its `client` is the API's) and imports no redis at all
REDIS_ALLOWED = ("daemon/bus/", "worker/", "cli/")
# connections themselves: made, checked in step, following Sentinel (none touches WorkTrain's keys)
REDIS_PLUMBING = {
    "daemon/host/redisconn.py",
    "daemon/host/embedded_redis.py",
    "daemon/host/instep.py",
    "daemon/host/sentinel.py",
    "daemon/host/sentinelwatch.py",
}
CONNECTION_NAMES = ("client", "redis", "pipe", "pipeline", "connection", "conn")


def raw_redis_calls(source: str, where: str) -> list[str]:
    """Calls of a Redis command on something named like a connection (`client.hget(...)`,
    `self.bus.client.xread(...)`, `pipe.exists(...)`)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        receiver = node.func.value
        name = receiver.attr if isinstance(receiver, ast.Attribute) else getattr(receiver, "id", "")
        if node.func.attr in REDIS_COMMANDS and name.lower().endswith(CONNECTION_NAMES):
            found.append(f"{where}:{node.lineno}: {ast.unparse(receiver)}.{node.func.attr}(...)")
    return found


def test_no_redis_command_outside_the_bus_and_the_worker_shell() -> None:
    calls = []
    for path in product_files():
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(REDIS_ALLOWED) or rel in REDIS_PLUMBING:
            continue
        calls += raw_redis_calls(path.read_text(), rel)
    assert calls == [], "Redis commands belong behind daemon/bus/ (a typed call): " + "\n".join(calls)
    cli = [module_name(path) for path in (ROOT / "cli").rglob("*.py") if imports_of(path, {"redis"})]
    assert cli == [], f"the CLI talks to the HTTP API, never to Redis: {cli}"


def test_the_redis_check_catches_what_it_is_for() -> None:
    source = "self.bus.client.exists(k)\nclient.xread({})\npipe.hset(k, 'a', 1)\nself.registry.get('x')\n"
    assert len(raw_redis_calls(source, "web/x.py")) == 3
