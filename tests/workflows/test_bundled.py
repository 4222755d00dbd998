"""The three bundled workflows: they load, a plain agent (no context, no artifacts: the
demo's) walks each to the end, and their loops and fragments do what they say."""

from __future__ import annotations

import pytest

from daemon.workflows import load_catalog
from daemon.workflows.engine import present
from tests.workflows.helpers import Walk, stop

pytestmark = pytest.mark.unit

CATALOG = load_catalog()


def test_the_bundled_workflows_load() -> None:
    assert CATALOG.problems == {}
    assert set(CATALOG.workflows) == {"explore-and-document", "fix-failing-tests", "review-changes"}


@pytest.mark.parametrize("workflow_id", sorted(CATALOG.workflows))
def test_an_agent_sending_only_notes_finishes_each(workflow_id: str) -> None:
    workflow = CATALOG.compiled(workflow_id)
    assert workflow is not None
    walk = Walk(workflow, {"goal": "g"})
    prompts = []
    while (shown := present(workflow, walk.state)) is not None and len(prompts) < 10:
        prompts.append(shown.prompt)
        walk.call()
    assert walk.current == "<complete>"
    assert not any("[unset:" in prompt for prompt in prompts)  # nothing shows a missing variable


def test_fix_failing_tests_loops_fix_and_verify_until_a_stop() -> None:
    workflow = CATALOG.compiled("fix-failing-tests")
    assert workflow is not None
    walk = Walk(workflow)
    walk.call(context={"failingCount": 2, "testCommand": "pytest -q"})
    walk.run([{}, {}, {}, {}, {"artifacts": stop()}, {}])
    assert walk.seen == ["reproduce", "diagnose", "fix", "verify", "fix", "verify", "report", "<complete>"]


def test_fix_failing_tests_with_nothing_failing_goes_straight_to_the_report() -> None:
    workflow = CATALOG.compiled("fix-failing-tests")
    assert workflow is not None
    walk = Walk(workflow)
    walk.call(context={"failingCount": 0, "testCommand": "pytest -q"})
    shown = present(workflow, walk.state)
    assert shown is not None and shown.step_id == "report" and "Nothing failed at the start" in shown.prompt


def test_review_changes_asks_for_more_on_a_high_risk_change() -> None:
    workflow = CATALOG.compiled("review-changes")
    assert workflow is not None
    walk = Walk(workflow)
    walk.call(context={"riskLevel": "High"})
    shown = present(workflow, walk.state)
    assert shown is not None and "This change is high-risk" in shown.prompt
