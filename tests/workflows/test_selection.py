"""Step selection (SEMANTICS §1): top-level rescans, backfill, every loop kind with entry,
exit and maxIterations, mid-iteration exit, the forward-only body scan. Small workflows of
our own, each run through the pure engine."""

from __future__ import annotations

import pytest

from daemon.workflows.engine import Advanced, Blocked, Pending
from tests.workflows.helpers import Walk, build, exit_step, go, loop, step, stop

pytestmark = pytest.mark.unit

DONE = "<complete>"


def test_start_is_steps_0_even_when_its_run_condition_is_false() -> None:
    workflow = build([step("first", runCondition={"var": "never"}), step("second")])
    assert Walk(workflow).seen == ["first"]


def test_skipped_steps_are_rechecked_at_every_selection_and_can_run_later() -> None:
    workflow = build(
        [
            step("a"),
            step("b", runCondition={"var": "late", "equals": True}),
            step("c"),
            step("d", runCondition={"var": "never"}),
        ]
    )
    walk = Walk(workflow)
    walk.call()  # a -> b skipped -> c
    walk.call(context={"late": "yes"})  # completing c makes b eligible: the rescan finds it
    walk.call()
    assert walk.seen == ["a", "c", "b", DONE]


def test_a_step_skipped_and_never_eligible_is_not_completed_but_the_workflow_ends() -> None:
    workflow = build([step("a"), step("b", runCondition={"var": "x", "equals": 1})])
    walk = Walk(workflow)
    walk.call()
    assert walk.seen == ["a", DONE] and "b" not in walk.state.completed


# --- for --------------------------------------------------------------------------------------


def test_for_loop_with_a_number_runs_count_times() -> None:
    workflow = build([step("a"), loop("l", [step("b1"), step("b2")], type="for", count=2), step("z")])
    assert Walk(workflow).run([{}] * 5) == ["a", "b1", "b2", "b1", "b2", "z"]


def test_for_loop_count_from_the_context_and_re_read_at_each_decision() -> None:
    workflow = build([step("a"), loop("l", [step("b")], type="for", count="n"), step("z")])
    walk = Walk(workflow)
    walk.run([{"context": {"n": 3}}, {"context": {"n": 2}}, {}])  # lowered mid-loop: ends after pass 2
    assert walk.seen == ["a", "b", "b", "z"]


def test_for_loop_count_that_is_not_a_number_blocks_and_keeps_nothing() -> None:
    workflow = build([step("a"), loop("l", [step("b")], type="for", count="n"), step("z")])
    walk = Walk(workflow)
    for bad in ({"n": "3"}, {"n": True}, {}):  # a numeric string is refused (probe P5)
        result = walk.call(context=bad)
        assert isinstance(result, Blocked) and result.reasons[0].code == "MISSING_CONTEXT"
        assert "requires numeric context['n']" in result.reasons[0].message
    assert walk.current == "a" and walk.state.context == {}  # nothing saved
    walk.call(context={"n": 1})
    assert walk.seen == ["a", "b"]


def test_for_loop_with_count_zero_is_skipped_and_count_above_max_is_cut() -> None:
    skipped = build([step("a"), loop("l", [step("b")], type="for", count="n"), step("z")])
    assert Walk(skipped).run([{"context": {"n": 0}}]) == ["a", "z"]
    capped = build([step("a"), loop("l", [step("b")], type="for", count=9, maxIterations=2), step("z")])
    assert Walk(capped).run([{}] * 3) == ["a", "b", "b", "z"]


# --- forEach ----------------------------------------------------------------------------------


def test_for_each_runs_once_per_item_with_loop_variables() -> None:
    body = [
        step("each", prompt="{{currentItem}} #{{currentIndex}} pass {{currentIteration}} of {{items.length}}")
    ]
    workflow = build([step("a"), loop("l", body, type="forEach", items="items"), step("z")])
    walk = Walk(workflow)
    walk.call(context={"items": ["x", "y"]})
    from daemon.workflows.engine import present

    assert "x #0 pass 1 of 2" in present(workflow, walk.state).prompt  # type: ignore[union-attr]
    walk.call()
    assert "y #1 pass 2 of 2" in present(workflow, walk.state).prompt  # type: ignore[union-attr]
    walk.call()
    assert walk.seen == ["a", "each", "each", "z"]


def test_for_each_custom_variable_names() -> None:
    body = [step("each", prompt="{{slice.name}} at {{i}}, pass {{n}}")]
    config = {"type": "forEach", "items": "slices", "itemVar": "slice", "indexVar": "i", "iterationVar": "n"}
    workflow = build([step("a"), loop("l", body, **config)])
    walk = Walk(workflow)
    walk.call(context={"slices": [{"name": "api"}]})
    from daemon.workflows.engine import present

    assert "api at 0, pass 1" in present(workflow, walk.state).prompt  # type: ignore[union-attr]


def test_for_each_empty_skips_missing_blocks_and_items_are_re_read() -> None:
    workflow = build([step("a"), loop("l", [step("b")], type="forEach", items="xs"), step("z")])
    assert Walk(workflow).run([{"context": {"xs": []}}]) == ["a", "z"]
    blocked = Walk(workflow).call(context={"xs": "not a list"})
    assert isinstance(blocked, Blocked) and "requires array context['xs']" in blocked.reasons[0].message
    shrinking = Walk(workflow)
    shrinking.run([{"context": {"xs": [1, 2, 3]}}, {"context": {"xs": [1]}}])  # the list shrank: done
    assert shrinking.seen == ["a", "b", "z"]


def test_for_each_body_using_item_fields_over_strings_fails_at_entry() -> None:
    body = [step("b", prompt="Handle {{currentItem.name}}.")]
    workflow = build([step("a"), loop("l", body, type="forEach", items="xs")])
    result = Walk(workflow).call(context={"xs": ["plain"]})
    assert isinstance(result, Blocked) and "contains strings" in result.reasons[0].message


# --- while / until with a context condition -----------------------------------------------------


def test_while_loop_is_re_checked_before_every_body_step_mid_iteration_exit() -> None:
    body = [step("b1"), step("b2"), step("b3")]
    workflow = build([step("a"), loop("l", body, type="while", condition={"var": "go"}), step("z")])
    walk = Walk(workflow)
    walk.run([{"context": {"go": True}}, {}, {"context": {"go": False}}])  # b2 turns it off
    assert walk.seen == ["a", "b1", "b2", "z"]  # b3 never runs: the pre-check exits at once


def test_while_false_at_entry_runs_no_body_step() -> None:
    workflow = build([step("a"), loop("l", [step("b")], type="while", condition={"var": "go"}), step("z")])
    walk = Walk(workflow)
    walk.call()
    assert walk.seen == ["a", "z"] and "l" in walk.state.completed


def test_until_loop_inverts_the_condition() -> None:
    condition = {"var": "found", "equals": True}
    workflow = build([step("a"), loop("l", [step("b")], type="until", condition=condition), step("z")])
    assert Walk(workflow).run([{}, {}, {"context": {"found": True}}]) == ["a", "b", "b", "z"]


def test_max_iterations_is_a_natural_stop() -> None:
    workflow = build(
        [step("a"), loop("l", [step("b")], type="while", condition={"var": "go"}, maxIterations=3), step("z")]
    )
    assert Walk(workflow).run([{"context": {"go": True}}, {}, {}, {}]) == ["a", "b", "b", "b", "z"]


def test_loop_condition_sees_the_iteration_variable() -> None:
    condition = {"var": "currentIteration", "lte": 2}
    workflow = build([step("a"), loop("l", [step("b")], type="while", condition=condition), step("z")])
    assert Walk(workflow).run([{}] * 3) == ["a", "b", "b", "z"]


# --- while with wr.loop_control artifacts ---------------------------------------------------


ARTIFACTS = {"kind": "artifact_contract", "contractRef": "wr.contracts.loop_control"}


def artifact_loop(max_iterations: int = 4, loop_type: str = "while") -> list[dict[str, object]]:
    """As WorkRail's files write them: an explicit conditionSource (WorkRail's structural
    validation wants it, or a condition, even though a loop_control body implies it)."""
    config = {"type": loop_type, "maxIterations": max_iterations, "conditionSource": ARTIFACTS}
    return [step("a"), loop("l", [step("work"), exit_step("decide")], **config), step("z")]


def test_artifact_loop_continues_without_an_artifact_and_exits_on_stop() -> None:
    walk = Walk(build(artifact_loop()))
    walk.run([{}, {}, {"artifacts": go()}, {}, {"artifacts": stop()}])
    assert walk.seen == ["a", "work", "decide", "work", "decide", "z"]


def test_a_loop_control_body_overrides_the_condition_and_until_is_not_inverted() -> None:
    steps = artifact_loop(loop_type="until")
    del steps[1]["loop"]["conditionSource"]  # type: ignore[attr-defined]
    steps[1]["loop"]["condition"] = {"var": "never"}  # type: ignore[index]
    walk = Walk(build(steps))
    walk.run([{}, {}, {"artifacts": go()}, {}, {"artifacts": stop()}])
    assert walk.seen == ["a", "work", "decide", "work", "decide", "z"]


def test_a_stop_from_a_non_exit_body_step_exits_mid_iteration() -> None:
    walk = Walk(build(artifact_loop()))
    walk.run([{}, {"artifacts": stop()}])  # `work` sends stop (Q1): `decide` is not presented
    assert walk.seen == ["a", "work", "z"]


def test_a_stop_from_the_step_before_the_loop_skips_the_loop() -> None:
    walk = Walk(build(artifact_loop()))
    walk.run([{"artifacts": stop()}])  # Q2
    assert walk.seen == ["a", "z"]


def test_the_last_valid_loop_control_decides_and_invalid_ones_are_ignored() -> None:
    mixed = [
        {"kind": "wr.loop_control", "decision": "continue"},
        {"kind": "wr.loop_control", "decision": "stop", "loopId": "ignored-id"},  # loopId not matched
        {"kind": "wr.loop_control", "decision": "maybe"},  # invalid: skipped
    ]
    walk = Walk(build(artifact_loop()))
    walk.run([{}, {}, {"artifacts": mixed}])
    assert walk.seen == ["a", "work", "decide", "z"]


def test_artifact_loop_stops_at_max_iterations() -> None:
    walk = Walk(build(artifact_loop(max_iterations=2)))
    walk.run([{}, {}, {"artifacts": go()}, {}, {"artifacts": go()}])
    assert walk.seen == ["a", "work", "decide", "work", "decide", "z"]


# --- body scan and runConditions -------------------------------------------------------------


def test_body_scan_is_forward_only_within_an_iteration() -> None:
    body = [step("b1", runCondition={"var": "x"}), step("b2")]
    workflow = build([step("a"), loop("l", body, type="for", count=2), step("z")])
    walk = Walk(workflow)
    walk.run([{}, {"context": {"x": True}}, {}, {}])  # b2 turns x on: b1 waits for the next pass
    assert walk.seen == ["a", "b2", "b1", "b2", "z"]


def test_body_run_condition_sees_loop_variables() -> None:
    body = [step("only-first", runCondition={"var": "currentIteration", "equals": 1}), step("every")]
    workflow = build([step("a"), loop("l", body, type="for", count=2), step("z")])
    assert Walk(workflow).run([{}] * 4) == ["a", "only-first", "every", "every", "z"]


def test_a_loop_step_run_condition_is_checked_at_top_level() -> None:
    workflow = build(
        [step("a"), loop("l", [step("b")], type="for", count=1, runCondition={"var": "on"}), step("z")]
    )
    assert Walk(workflow).run([{}]) == ["a", "z"]
    assert Walk(workflow).run([{"context": {"on": 1}}, {}]) == ["a", "b", "z"]


def test_a_string_body_names_a_top_level_step_that_then_never_runs_at_top_level() -> None:
    workflow = build([step("a"), loop("l", "b", type="for", count=2), step("b"), step("z")])
    assert Walk(workflow).run([{}] * 3) == ["a", "b", "b", "z"]


def test_step_instances_are_keyed_by_loop_and_iteration() -> None:
    walk = Walk(build([step("a"), loop("l", [step("b")], type="for", count=2), step("z")]))
    walk.run([{}, {}, {}, {}])
    assert walk.state.completed == ("a", "l@0::b", "l@1::b", "l", "z")
    assert Pending(stepId="b", loopPath=(("l", 3),)).key == "l@3::b"


def test_a_blocked_call_changes_nothing_and_its_context_is_not_kept() -> None:
    walk = Walk(build(artifact_loop()))
    walk.run([{}, {}])
    before = walk.state
    result = walk.call(context={"secret": 1}, artifacts=[])  # `decide` needs its artifact
    assert isinstance(result, Blocked) and walk.state is before
    result = walk.call(artifacts=stop())
    assert isinstance(result, Advanced) and "secret" not in walk.state.context


@pytest.mark.parametrize("loop_type", ["for", "forEach", "while", "until"])
def test_every_loop_kind_resumes_from_its_saved_state(loop_type: str) -> None:
    config = {
        "for": {"type": "for", "count": 3},
        "forEach": {"type": "forEach", "items": "xs"},
        "while": {"type": "while", "condition": {"var": "go"}},
        "until": {"type": "until", "condition": {"var": "halt"}},
    }[loop_type]
    workflow = build([step("a"), loop("l", [step("b1"), step("b2")], **config), step("z")])
    walk = Walk(workflow)
    walk.run([{"context": {"xs": [1, 2, 3], "go": True}}, {}, {}, {}])  # in pass 2, at b2
    from daemon.workflows.engine import EngineState

    saved = walk.state.model_dump_json()
    resumed = Walk(workflow)
    resumed.state = EngineState.model_validate_json(saved)
    assert resumed.current == "b2" and resumed.state.loopStack[0].iteration == 1
    assert resumed.state.context == walk.state.context
