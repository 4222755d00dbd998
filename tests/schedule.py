"""The order the tests are handed out in: the modules of the slowest tier first.

pytest-xdist runs with `--dist loadscope` (pyproject.toml): a module goes whole to one worker,
so a module-scoped stack (tests/console, tests/e2e, test_journal_resume's crash points) is
started once, not once per worker nor again each time a worker comes back to the module.
Its own reordering (`--loadscope-reorder`, by number of tests) would put the one-test e2e
modules of half a minute last, where one worker runs them while the other idles; instead the
modules whose slowest test has the highest tier (tests/tiers.py) go first, and the run ends
on the many small unit modules both workers share. Within a module, and among modules of one
tier, the collection's order is kept.
"""

from __future__ import annotations

import pytest

from tests.tiers import RANK, tier_of


@pytest.hookimpl(trylast=True)  # after the tiers are assigned and -m has selected
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    slowest: dict[str, int] = {}
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        slowest[module] = max(slowest.get(module, 0), RANK.get(tier_of(item) or "unit", 0))
    position = {id(item): n for n, item in enumerate(items)}
    items.sort(key=lambda item: (-slowest[item.nodeid.split("::", 1)[0]], position[id(item)]))
