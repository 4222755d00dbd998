"""Every test has exactly one tier, and the two cheap tiers keep their promise.

The tiers, from the cheapest:

- `unit`: pure code and fakeredis; no child process, no socket, no real Redis.
- `redis`: a real redis-server (the session's, `redis_server`) or another socket (the fake
  model's HTTP server in this process, a port nothing listens on); no process of its own.
- `processes`: child processes: `worktrain` commands, or what the agent's tools run (bash,
  git, rg, the sandbox).
- `e2e`: a whole stack as a user runs it (redis-server, `worktrain web`, workers, the model).
- `chaos`: long fault-injection runs, skipped unless WORKTRAIN_CHAOS=1 (tests/crash).

Each test module declares the least tier of its tests, `pytestmark = pytest.mark.unit` at
its top (a test or a class may declare its own instead: the closest declaration wins). A
fixture that needs more says so with `@fixture_tier("redis")` under its `@pytest.fixture`,
and every test that uses it, directly or through another fixture, is raised to that tier
(so `redis_client`'s "fake" runs are unit tests and its "real" ones redis tests). A test
without a declaration, or with two tiers on one node, fails the collection, saying what to
add. Both cheap tiers are enforced, not just declared (tests/tierguard.py): a unit test
that connects or binds a socket or starts a process fails, and so does a redis test that
starts a process. After the check each test carries exactly one tier marker, its own, so `-m unit`,
`-m "redis or processes"` or `-m "not e2e"` select by the tier a test really has.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import pytest

TIERS = ("unit", "redis", "processes", "e2e", "chaos")  # cheapest first
RANK = {name: rank for rank, name in enumerate(TIERS)}
MEANING = {
    "unit": "no process, no socket, no real Redis: pure code or fakeredis",
    "redis": "a real redis-server or another socket, but no process of its own",
    "processes": "child processes: worktrain commands, or bash/git/rg run by the agent's tools",
    "e2e": "a whole stack: redis-server, worktrain web, workers, the fake model",
    "chaos": "a long fault-injection run (WORKTRAIN_CHAOS=1)",
}
TIER_ATTRIBUTE = "__worktrain_tier__"

FixtureFunction = TypeVar("FixtureFunction", bound=Callable[..., Any])


def fixture_tier(tier: str | Mapping[Any, str]) -> Callable[[FixtureFunction], FixtureFunction]:
    """The least tier of every test that uses this fixture; for a parametrized fixture, a
    mapping from each param to its tier. Goes under `@pytest.fixture`."""
    tiers = tier.values() if isinstance(tier, Mapping) else [tier]
    unknown = [t for t in tiers if t not in RANK]
    if unknown:
        raise ValueError(f"unknown tier {unknown[0]!r}: one of {', '.join(TIERS)}")

    def mark(function: FixtureFunction) -> FixtureFunction:
        setattr(function, TIER_ATTRIBUTE, tier)
        return function

    return mark


def register(config: pytest.Config) -> None:
    for name in TIERS:
        config.addinivalue_line("markers", f"{name}: tier: {MEANING[name]} (tests/tiers.py)")


def declared(item: pytest.Item) -> tuple[str | None, list[str]]:
    """The closest tier declared on the item or its parents, and what is wrong with them."""
    for node in reversed(item.listchain()):
        names = sorted({m.name for m in node.own_markers if m.name in RANK}, key=RANK.__getitem__)
        if len(names) > 1:
            return None, [
                f"{node.nodeid or node.name} declares {len(names)} tiers ({', '.join(names)}): keep one"
            ]
        if names:
            return names[0], []
    return None, []


def required_by_fixtures(item: pytest.Item) -> str | None:
    """The highest tier the item's fixtures (its whole closure) ask for, if any."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    params = getattr(getattr(item, "callspec", None), "params", {})
    best: str | None = None
    for name in item.fixturenames:  # type: ignore[attr-defined]
        for fixturedef in info.name2fixturedefs.get(name, ()):
            wanted = getattr(fixturedef.func, TIER_ATTRIBUTE, None)
            if isinstance(wanted, Mapping):
                wanted = wanted.get(params.get(name))
            if wanted is not None and (best is None or RANK[wanted] > RANK[best]):
                best = wanted
    return best


def missing_tier_message(path: Path, root: Path) -> str:
    where = path.relative_to(root) if path.is_relative_to(root) else path
    choices = "\n".join(f"      {name:<10} {MEANING[name]}" for name in TIERS)
    return (
        f"{where} has tests without a tier. Add at its top, after its imports, the least tier\n"
        f"of its tests:\n"
        f"    pytestmark = pytest.mark.unit\n"
        f"  or redis, processes, e2e, chaos (a test may carry its own @pytest.mark.<tier>):\n"
        f"{choices}\n"
        f"  A fixture that needs more marks it with @fixture_tier(...). A unit test that connects a\n"
        f"  socket or starts a process fails, and a redis test that starts one. See tests/tiers.py."
    )


def check(collector: pytest.Collector, collected: list[pytest.Item | pytest.Collector]) -> str | None:
    """What is wrong with the tiers of the tests a module or class collected, if anything."""
    problems: list[str] = []
    untiered = False
    for item in collected:
        if isinstance(item, pytest.Item):
            tier, wrong = declared(item)
            problems += wrong
            untiered = untiered or (tier is None and not wrong)
    if untiered:
        problems.append(missing_tier_message(collector.path, collector.config.rootpath))
    return "\n".join(dict.fromkeys(problems)) or None


def assign(items: list[pytest.Item]) -> None:
    """Give every item its one tier marker: the closest declared, or more if a fixture asks."""
    tiers: dict[pytest.Item, str] = {}
    for item in items:
        tier, _wrong = declared(item)
        assert tier is not None, f"{item.nodeid}: `check` let it through without a tier"
        needed = required_by_fixtures(item)
        tiers[item] = needed if needed is not None and RANK[needed] > RANK[tier] else tier
    for item in items:  # only each item's own tier is left for -m to see
        for node in item.listchain():
            node.own_markers[:] = [m for m in node.own_markers if m.name not in RANK]
    for item, tier in tiers.items():
        item.add_marker(tier)
        item.stash[TIER_KEY] = tier


TIER_KEY = pytest.StashKey[str]()


def tier_of(item: pytest.Item) -> str | None:
    return item.stash.get(TIER_KEY, None)


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[pytest.CollectReport]:
    """A module (or class) with a test of no tier, or of two, is a collection error naming the
    file and what to add: the run fails (pytest alone stops before any test; under
    pytest-xdist the other modules still run)."""
    report: pytest.CollectReport = yield
    if report.passed and isinstance(collector, (pytest.Module, pytest.Class)):
        problem = check(collector, list(report.result))
        if problem is not None:
            report.outcome = "failed"
            report.longrepr = problem
            report.result = []
    return report


@pytest.hookimpl(tryfirst=True)  # before -m selects: every test's one tier is known by then
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    assign(items)
