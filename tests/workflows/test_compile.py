"""Loading (SEMANTICS §3.1, docs/durability.md): WorkRail's structural validation and compiler rules,
templateCall expansion from routines, features, refs and promptBlocks rendering, and the
catalog's skipped files with their reasons."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from daemon.workflows import Workflow, WorkflowError, load_catalog
from daemon.workflows.compiler import render_blocks
from daemon.workflows.definition import ArtifactSource, ContextSource, PromptBlocks
from daemon.workflows.engine import present
from tests.workflows.helpers import Walk, build, exit_step, loop, step

pytestmark = pytest.mark.unit

ROUTINE = Workflow.model_validate(
    {
        "id": "wr.routine-review",
        "name": "Review routine",
        "description": "d",
        "version": "1.0.0",
        "metaGuidance": ["Be candid."],
        "steps": [
            {
                "id": "read",
                "title": "Read {target}",
                "prompt": "Read {target} closely; keep {{ctx}} as it is.",
            },
            {
                "id": "judge",
                "title": "Judge",
                "prompt": "Judge it ({depth}).",
                "runCondition": {"var": "own"},
            },
        ],
    }
)


def blocks(**fields: Any) -> PromptBlocks:
    return PromptBlocks.model_validate(fields)


def test_prompt_blocks_render_in_workrail_order() -> None:
    text = render_blocks(
        blocks(
            verify=["It works"],
            outputRequired={"zeta": "last key", "alpha": "first key"},
            procedure=["Look", "1. Already numbered", "Decide"],
            constraints=[
                "No guessing",
                [{"kind": "text", "text": "two "}, {"kind": "text", "text": "parts"}],
            ],
            goal="Ship it",
        ),
        "s",
    )
    assert text == (
        "## Goal\nShip it\n\n## Constraints\n- No guessing\n- two parts\n\n"
        "## Procedure\n1. Look\n2. Already numbered\n3. Decide\n\n"  # "2. 1. ..." in WorkRail: fixed
        "## Output Required\n- **zeta**: last key\n- **alpha**: first key\n\n## Verify\n- It works"
    )


def test_empty_prompt_blocks_and_both_prompt_sources_are_refused() -> None:
    with pytest.raises(WorkflowError, match="at least one non-empty section"):
        render_blocks(blocks(constraints=[]), "s")
    with pytest.raises(WorkflowError, match="declares multiple prompt sources"):
        build([step("s", promptBlocks={"goal": "g"})])


def test_features_append_to_prompt_blocks_steps_only_and_refs_resolve() -> None:
    workflow = build(
        [
            {
                "id": "blocks",
                "title": "B",
                "promptBlocks": {
                    "goal": "g",
                    "constraints": [[{"kind": "ref", "refId": "wr.refs.notes_first_durability"}]],
                },
            },
            step("plain"),
        ],
        features=["wr.features.capabilities"],
    )
    prompt = workflow.runnable["blocks"].prompt or ""
    assert "- Durability rules (notes-first):\n- Use output.notesMarkdown" in prompt
    assert prompt.index("Durability rules") < prompt.index("Do not assume optional capabilities")
    assert "## Verify\n- No capability-dependent path" in prompt
    assert workflow.runnable["plain"].prompt == "Do plain."


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"features": ["wr.features.nope"]}, "Unknown feature 'wr.features.nope'"),
        (
            {
                "steps": [
                    {
                        "id": "s",
                        "title": "S",
                        "promptBlocks": {"goal": [{"kind": "ref", "refId": "wr.refs.x"}]},
                    }
                ]
            },
            "Unknown ref 'wr.refs.x'",
        ),
        (
            {"steps": [{"id": "s", "title": "S", "prompt": "Use {{wr.unknown}}."}]},
            "unresolved token '{{wr.unknown}}'",
        ),
    ],
)
def test_compiler_errors(fields: dict[str, Any], message: str) -> None:
    base = {"id": "t", "name": "T", "steps": [{"id": "s", "title": "S", "promptBlocks": {"goal": "g"}}]}
    with pytest.raises(WorkflowError, match=message.replace("{", r"\{").replace(".", r"\.")):
        from daemon.workflows import compile_workflow

        compile_workflow(Workflow.model_validate({**base, **fields}))


def test_template_call_expands_in_place_with_ids_args_and_the_callers_condition() -> None:
    call = {"templateId": "wr.templates.routine.review", "args": {"target": "the parser", "depth": 2}}
    workflow = build(
        [
            step("a"),
            {"id": "rev", "title": "dropped", "templateCall": call, "runCondition": {"var": "go"}},
            step("z"),
        ],
        routines=[ROUTINE],
    )
    assert [s.id for s in workflow.steps] == ["a", "rev.read", "rev.judge", "z"]
    read, judge = workflow.runnable["rev.read"], workflow.runnable["rev.judge"]
    assert (read.title, read.prompt) == ("Read the parser", "Read the parser closely; keep {{ctx}} as it is.")
    assert judge.prompt == "Judge it (2)."
    assert read.runCondition == {"var": "go"} and judge.runCondition == {"var": "own"}  # own wins, no AND
    assert read.guidance == ("Be candid.",)  # the routine's metaGuidance
    walk = Walk(workflow)
    assert walk.run([{"context": {"go": True, "own": True}}, {}, {}]) == ["a", "rev.read", "rev.judge", "z"]


def test_template_call_inside_a_loop_body() -> None:
    call = {"templateId": "wr.templates.routine.review", "args": {"target": "x", "depth": 1}}
    body = [{"id": "rev", "title": "R", "templateCall": call}, exit_step("decide")]
    workflow = build([step("a"), loop("l", body, type="while", condition={"var": "x"})], routines=[ROUTINE])
    assert [s.id for s in workflow.loops["l"].body] == ["rev.read", "rev.judge", "decide"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            {"target": "x"},
            "MISSING_TEMPLATE_ARG: routine 'wr.routine-review' step 'judge' references arg\\(s\\) 'depth'",
        ),
        ({"target": {"a": 1}, "depth": 1}, "INVALID_TEMPLATE_ARG_TYPE"),
    ],
)
def test_template_args_must_be_given_and_primitive(args: dict[str, Any], message: str) -> None:
    call = {"templateId": "wr.templates.routine.review", "args": args}
    with pytest.raises(WorkflowError, match=message):
        build([step("a"), {"id": "rev", "title": "R", "templateCall": call}], routines=[ROUTINE])


def test_unknown_templates_duplicates_and_a_first_template_call_are_refused() -> None:
    call = {"templateId": "wr.templates.routine.review", "args": {"target": "x", "depth": 1}}
    with pytest.raises(WorkflowError, match=re.escape("Unknown template 'wr.templates.routine.nope'")):
        build(
            [
                step("a"),
                {"id": "r", "title": "R", "templateCall": {"templateId": "wr.templates.routine.nope"}},
            ]
        )
    with pytest.raises(WorkflowError, match=re.escape("Duplicate step id 'rev.read' after template")):
        build(
            [step("a"), {"id": "rev", "title": "R", "templateCall": call}, step("rev.read")],
            routines=[ROUTINE],
        )
    with pytest.raises(WorkflowError, match="steps\\[0\\] not found in executable workflow"):
        build([{"id": "rev", "title": "R", "templateCall": call}], routines=[ROUTINE])


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ([step("a"), step("a")], "Duplicate step ID 'a'"),
        ([{"id": "a", "title": "A"}], "Step 'a' must have prompt, promptBlocks, or templateCall"),
        ([{"id": "a", "prompt": "p"}], "Step 'a' missing required title"),
        (
            [step("a"), loop("l", [step("b")], type="while")],
            "while loop requires a condition or conditionSource",
        ),
        ([step("a"), loop("l", [step("b")], type="for")], "for loop requires a count"),
        ([step("a"), loop("l", [step("b")], type="for", count=-1)], "count must be a positive number"),
        ([step("a"), loop("l", [step("b")], type="forEach")], "forEach loop requires items"),
        ([step("a"), loop("l", [], type="for", count=1)], "Loop body array cannot be empty"),
        ([step("a"), loop("l", "nope", type="for", count=1)], "references non-existent step 'nope'"),
        (
            [step("a"), loop("l", [step("b")], type="for", count=1, maxIterations=0)],
            "maxIterations must be a positive",
        ),
        (
            [step("a"), loop("l", [step("b")], type="for", count=1, maxIterations=1001)],
            "exceeds safety limit of 1000",
        ),
        (
            [step("a"), loop("l", [step("b")], type="for", count=1, maxIterations=2.5)],
            "must be a whole number",
        ),
        (
            [step("a"), loop("l", [loop("m", [step("c")], type="for", count=1)], type="for", count=1)],
            "Nested loops",
        ),
        (
            [step("a"), loop("l", [step("a")], type="for", count=1)],
            "Duplicate step id 'a' after template expansion",
        ),
        (
            [step("a"), loop("l", "b", type="for", count=1), step("b", runCondition={"var": "x"})],
            "Step 'b' is a loop body but has runCondition",
        ),
        ([step("a", promptFragments=[{"id": "f", "text": "uses {{wr.refs.x}}"}])], "fragments are raw text"),
        (
            [step("a", outputContract={"contractRef": "wr.contracts.nope"})],
            "unknown outputContract.contractRef",
        ),
        (
            [step("a", assessmentRefs=["ghost"])],
            "declares assessmentRefs but workflow declares no assessments",
        ),
        (
            [step("a", validationCriteria=[{"type": "schema", "schema": {}}])],
            "'schema' is not supported by WorkTrain",
        ),
        ([step("a", validationCriteria=[{"type": "regex", "pattern": "("}])], "Invalid regex pattern"),
    ],
)
def test_structural_validation_refuses_with_workrails_reason(
    steps: list[dict[str, Any]], message: str
) -> None:
    with pytest.raises(
        WorkflowError, match=message.replace("(", r"\(").replace("{", r"\{").replace("[", r"\[")
    ):
        build(steps)


def test_the_condition_source_of_while_loops() -> None:
    condition = {"var": "x"}
    workflow = build(
        [
            step("a"),
            loop("ctx", [step("b")], type="while", condition=condition),
            loop("art", [step("c"), exit_step("d")], type="while", condition=condition),  # the contract wins
        ]
    )
    assert isinstance(workflow.loops["ctx"].source, ContextSource)
    assert isinstance(workflow.loops["art"].source, ArtifactSource)


def test_unknown_fields_are_ignored_and_limits_kept() -> None:
    workflow = build([step("a", expectedOutput="x", hasValidation=True)], tags=["t"], limits={"maxTurns": 7})
    assert workflow.limits.maxTurns == 7 and present(workflow, Walk(workflow).state) is not None


def write(folder: Path, name: str, data: Any) -> None:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data))


def test_the_catalog_skips_bad_files_with_reasons_and_finds_routines(tmp_path: Path) -> None:
    routine = {
        "id": "plain-name",
        "name": "R",
        "description": "d",
        "version": "1.0.0",
        "steps": [{"id": "one", "title": "One", "prompt": "Do one."}],
    }
    call = {"id": "caller", "title": "C", "templateCall": {"templateId": "wr.templates.routine.plain-name"}}
    write(tmp_path, "routines/plain.json", routine)  # a routine by its folder, not its id
    write(tmp_path, "uses-routine.json", {"id": "uses", "name": "U", "steps": [step("a"), call]})
    write(tmp_path, "broken.json", "{not json")
    write(tmp_path, "no-steps.json", {"id": "x", "name": "X", "steps": []})
    write(
        tmp_path,
        "bad-loop.json",
        {"id": "y", "name": "Y", "steps": [step("a"), loop("l", [step("b")], type="for")]},
    )
    write(tmp_path, "zz-dup.json", {"id": "uses", "name": "Again", "steps": [step("a")]})
    write(tmp_path, ".hidden/ignored.json", "{}")
    catalog = load_catalog(tmp_path)
    assert {"uses", "plain-name", "explore-and-document"} <= set(catalog.workflows)
    assert [s.id for s in catalog.compiled("uses").steps] == ["a", "caller.one"]  # type: ignore[union-attr]
    problems = catalog.problems
    assert problems["broken.json"].startswith("not JSON")
    assert problems["no-steps.json"].startswith("steps: Tuple should have at least 1 item")
    assert problems["bad-loop.json"] == "Step 'l': for loop requires a count"
    assert problems["zz-dup.json"] == "workflow id 'uses' is already defined by uses-routine.json"
    assert not any("hidden" in name for name in problems)
    assert {"file": "bad-loop.json", "reason": problems["bad-loop.json"]} in catalog.skipped()
    summary = next(s for s in catalog.summaries() if s["id"] == "uses")
    assert summary["stepCount"] == 2 and summary["steps"][1] == {"id": "caller.one", "title": "One"}
