"""What blocks a step (SEMANTICS §4) and how the context merges (docs/redis.md)."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.workflows.engine import Advanced, Blocked, confirmation, merge_context
from tests.workflows.helpers import Walk, build, step
from tests.workflows.samples import DIFFERENTIATION

pytestmark = pytest.mark.unit

ASSESSMENTS = [
    {
        "id": "risk",
        "purpose": "How risky the change is",
        "dimensions": [
            {"id": "impact", "purpose": "Blast radius", "levels": ["low", "medium", "high"]},
            {"id": "confidence", "purpose": "How sure", "levels": ["Low", "High"], "required": False},
        ],
    },
    {
        "id": "quality",
        "purpose": "Quality",
        "dimensions": [{"id": "q", "purpose": "q", "levels": ["ok", "poor"]}],
    },
]


def reasons(result: Advanced | Blocked) -> list[str]:
    assert isinstance(result, Blocked), result
    return [r.code for r in result.reasons]


def one_step(**fields: Any) -> Walk:
    return Walk(build([step("s", **fields), step("next")], assessments=ASSESSMENTS))


def assessment(**dimensions: Any) -> dict[str, Any]:
    return {"kind": "wr.assessment", "dimensions": dimensions}


def test_notes_are_required_unless_optional_or_an_output_contract_decides() -> None:
    assert reasons(one_step().call(notes="   ")) == ["MISSING_REQUIRED_NOTES"]
    assert isinstance(one_step(notesOptional=True).call(notes=""), Advanced)
    contract = {"contractRef": "wr.contracts.loop_control", "required": False}
    assert isinstance(one_step(outputContract=contract).call(notes=""), Advanced)


@pytest.mark.parametrize(
    ("artifacts", "code", "text"),
    [
        ([], "MISSING_REQUIRED_OUTPUT", "Your artifacts were empty"),
        ([{"kind": "wr.assessment"}], "MISSING_REQUIRED_OUTPUT", "You submitted kind 'wr.assessment'"),
        (
            [
                {
                    "kind": "wr.gate_verdict",
                    "version": 1,
                    "verdict": "approved",
                    "confidence": "high",
                    "rationale": "short",
                }
            ],
            "INVALID_REQUIRED_OUTPUT",
            "rationale",
        ),
        (
            [
                {
                    "kind": "wr.gate_verdict",
                    "version": 1,
                    "verdict": "yes",
                    "confidence": "high",
                    "rationale": "x" * 20,
                }
            ],
            "INVALID_REQUIRED_OUTPUT",
            "verdict",
        ),
    ],
)
def test_an_output_contract_needs_a_valid_artifact_of_its_kind(
    artifacts: list[Any], code: str, text: str
) -> None:
    result = one_step(outputContract={"contractRef": "wr.contracts.gate_verdict"}).call(artifacts=artifacts)
    assert reasons(result) == [code]
    assert isinstance(result, Blocked)
    assert text in result.reasons[0].message + " ".join(result.reasons[0].issues)


def test_the_first_artifact_of_the_kind_is_the_one_checked() -> None:
    valid = {
        "kind": "wr.gate_verdict",
        "version": 1,
        "verdict": "approved",
        "confidence": "high",
        "rationale": "r" * 20,
    }
    walk = one_step(outputContract={"contractRef": "wr.contracts.gate_verdict"})
    assert reasons(walk.call(artifacts=[{**valid, "extra": 1}, valid])) == ["INVALID_REQUIRED_OUTPUT"]
    assert isinstance(walk.call(artifacts=[valid, {"kind": "wr.gate_verdict"}]), Advanced)


def test_a_differentiation_handoff_is_validated_not_always_refused() -> None:
    # WorkRail has no validator for this contract and refuses even a valid one (docs/DEVELOPING.md): fixed.
    handoff = DIFFERENTIATION
    walk = one_step(outputContract={"contractRef": "wr.contracts.differentiation_handoff"})
    assert reasons(walk.call(artifacts=[{**handoff, "generatedAt": "yesterday"}])) == [
        "INVALID_REQUIRED_OUTPUT"
    ]
    assert isinstance(walk.call(artifacts=[handoff]), Advanced)


def test_an_assessment_is_required_and_its_levels_checked() -> None:
    walk = one_step(assessmentRefs=["risk"])
    missing = walk.call(artifacts=[])
    assert reasons(missing) == ["INVALID_REQUIRED_OUTPUT"]
    assert isinstance(missing, Blocked)
    assert missing.reasons[0].issues == ('This step requires an assessment submission for "risk".',)
    assert "impact (low | medium | high)" in missing.reasons[0].suggestions[1]
    assert reasons(walk.call(artifacts=[assessment(impact="extreme")])) == ["INVALID_REQUIRED_OUTPUT"]
    assert reasons(walk.call(artifacts=[assessment(confidence="High")])) == ["INVALID_REQUIRED_OUTPUT"]
    assert reasons(walk.call(artifacts=[assessment(impact="low", bogus="x")])) == ["INVALID_REQUIRED_OUTPUT"]
    wrong_target = {**assessment(impact="low"), "assessmentId": "quality"}
    assert reasons(walk.call(artifacts=[wrong_target])) == ["INVALID_REQUIRED_OUTPUT"]
    # levels match case-insensitively; `confidence` is optional; a rationale form is accepted
    ok = assessment(impact={"level": "LOW", "rationale": "one file"})
    assert isinstance(walk.call(artifacts=[ok]), Advanced)


def test_several_assessment_refs_need_each_its_assessment_id() -> None:
    walk = one_step(assessmentRefs=["risk", "quality"])
    both_unnamed = [assessment(impact="low"), assessment(q="ok")]
    assert reasons(walk.call(artifacts=both_unnamed)) == ["INVALID_REQUIRED_OUTPUT"]
    named = [
        {**assessment(impact="low"), "assessmentId": "risk"},
        {**assessment(q="ok"), "assessmentId": "quality"},
    ]
    assert isinstance(walk.call(artifacts=named), Advanced)


def test_a_blocking_assessment_level_asks_for_a_follow_up_and_another_level_passes() -> None:
    consequence = {
        "when": {"anyEqualsLevel": "high"},
        "effect": {"kind": "require_followup", "guidance": "Mitigate it."},
    }
    walk = one_step(assessmentRefs=["risk"], assessmentConsequences=[consequence])
    result = walk.call(artifacts=[assessment(impact="HIGH")])  # normalized to the canonical "high"
    assert reasons(result) == ["ASSESSMENT_FOLLOWUP_REQUIRED"]
    assert isinstance(result, Blocked) and "Mitigate it." in result.reasons[0].message
    assert walk.current == "s"
    assert isinstance(walk.call(artifacts=[assessment(impact="medium")]), Advanced)  # Q9


def test_a_consequence_for_one_assessment_ignores_the_others() -> None:
    consequence = {
        "when": {"anyEqualsLevel": "poor", "forAssessment": "quality"},
        "effect": {"kind": "require_followup", "guidance": "Fix quality."},
    }
    walk = one_step(assessmentRefs=["risk", "quality"], assessmentConsequences=[consequence])
    named = [
        {**assessment(impact="low"), "assessmentId": "risk"},
        {**assessment(q="poor"), "assessmentId": "quality"},
    ]
    assert reasons(walk.call(artifacts=named)) == ["ASSESSMENT_FOLLOWUP_REQUIRED"]


def test_validation_criteria_check_the_notes() -> None:
    criteria = [
        {"type": "contains", "value": "Scope", "message": "Say the scope"},
        {"type": "length", "min": 60, "max": 500},
        {"type": "regex", "pattern": "^plan", "flags": "im"},
        {"type": "contains", "value": "urgent", "condition": {"var": "urgent"}},  # only when urgent
    ]
    walk = one_step(validationCriteria=criteria)
    result = walk.call(notes="scope is small " * 3)
    assert isinstance(result, Blocked) and result.reasons[0].code == "INVALID_REQUIRED_OUTPUT"
    assert list(result.reasons[0].issues) == [
        "Say the scope",
        "Output shorter than minimum length 60",
        "Pattern mismatch: ^plan",
    ]
    notes = "intro\nPLAN: the Scope is the parser module and its tests, nothing else at all."
    assert reasons(walk.call(notes=notes, context={"urgent": True})) == ["INVALID_REQUIRED_OUTPUT"]
    assert isinstance(walk.call(notes=notes), Advanced)


def test_validation_compositions() -> None:
    either = {"or": [{"type": "contains", "value": "alpha"}, {"type": "contains", "value": "beta"}]}
    walk = one_step(validationCriteria=either)
    assert reasons(walk.call(notes="gamma " * 20)) == ["INVALID_REQUIRED_OUTPUT"]
    assert isinstance(walk.call(notes="beta " * 20), Advanced)
    never = one_step(validationCriteria={"not": {"type": "contains", "value": "TODO"}})
    assert reasons(never.call(notes="TODO " * 20)) == ["INVALID_REQUIRED_OUTPUT"]


def test_context_merge_is_shallow_and_null_deletes() -> None:
    stored = {"keep": 1, "gone": 2, "obj": {"a": 1, "b": 2}, "xs": [1, 2]}
    merged = merge_context(stored, {"gone": None, "obj": {"a": 9}, "xs": [3], "new": "n"})
    assert merged == {"keep": 1, "obj": {"a": 9}, "xs": [3], "new": "n"}  # Q6: replaced, not merged
    assert merge_context(stored, None) == stored and merge_context({}, {"x": None}) == {}


def test_context_flows_into_the_stored_context_only_when_the_step_advances() -> None:
    walk = Walk(build([step("a"), step("b"), step("c")]))
    walk.call(context={"x": 1, "y": 2})
    walk.call(context={"y": None})
    assert walk.state.context == {"x": 1}


def test_a_reserved_context_key_blocks() -> None:
    result = one_step().call(context={"__proto__": {}})
    assert reasons(result) == ["INVALID_CONTEXT"]


@pytest.mark.parametrize(
    ("rule", "context", "expected"),
    [
        (None, {}, (False, None)),
        (False, {}, (False, None)),
        (True, {}, (True, "coordinator_eval")),
        ({"var": "big", "equals": True}, {"big": "yes"}, (True, "coordinator_eval")),
        ({"var": "big", "equals": True}, {}, (False, None)),
        ({"kind": "human_approval"}, {}, (True, "human_approval")),
        ({"kind": "human_approval", "condition": {"var": "big"}}, {}, (False, None)),
        ({"kind": "coordinator_eval", "condition": {"var": "big"}}, {"big": 1}, (True, "coordinator_eval")),
    ],
)
def test_require_confirmation_forms(
    rule: Any, context: dict[str, Any], expected: tuple[bool, str | None]
) -> None:
    walk = one_step(requireConfirmation=rule)
    assert confirmation(walk.workflow.runnable["s"], context) == expected
    result = walk.call(context=context)
    assert isinstance(result, Advanced) and (result.confirm, result.gate_kind) == expected
    assert walk.current == "next"  # it never changes which step comes next
