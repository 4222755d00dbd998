"""What the agent sees (SEMANTICS §3.2): templates, the loop banner, requirements,
fragments, the metrics footer, parallel steps."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.workflows.engine import present
from daemon.workflows.render import fill_templates
from tests.workflows.helpers import Walk, build, exit_step, loop, step

pytestmark = pytest.mark.unit

CTX = {
    "name": "Ada",
    "n": 3.0,
    "slice": {"title": "Parser", "files": ["a.py", "b.py"]},
    "off": False,
    "no": None,
}


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("Hi {{name}}", "Hi Ada"),
        ("{{n}} / {{off}}", "3 / false"),  # JS String(): 3.0 is "3"
        (
            "{{slice.title}} has {{slice.files.length}} files: {{slice.files}}",
            "Parser has 2 files: a.py,b.py",
        ),
        ("{{slice}}", "[object Object]"),
        ("{{missing}} {{no}} {{slice.owner}}", "[unset: missing] [unset: no] [unset: slice.owner]"),
        ("{{name.first}}", "[unset: name.first -- 'name' is string (\"Ada\"), not object]"),
        (
            "{{slice.owner.id}}",
            "[unset: slice.owner.id -- 'slice.owner' is undefined (\"undefined\"), not object]",
        ),
        ("{{n + 1}} {{wr.refs.x}} {x}", "{{n + 1}} {{wr.refs.x}} {x}"),  # not templates: left as they are
    ],
)
def test_templates(template: str, expected: str) -> None:
    assert fill_templates(template, CTX) == expected


def shown(walk: Walk) -> Any:
    step_shown = present(walk.workflow, walk.state)
    assert step_shown is not None
    return step_shown


def test_titles_and_prompts_are_rendered_with_the_context() -> None:
    walk = Walk(build([step("a"), step("b", title="Review {{who}}", prompt="For {{who}}.")]))
    walk.call(context={"who": "Ada"})
    assert (shown(walk).title, shown(walk).prompt) == ("Review Ada", "For Ada.")


def test_loop_banner_first_and_later_passes_and_none_on_the_decision_step() -> None:
    body = [step("work"), exit_step("decide")]
    cs = {"kind": "artifact_contract", "contractRef": "wr.contracts.loop_control"}
    walk = Walk(build([step("a"), loop("l", body, type="while", conditionSource=cs, maxIterations=3)]))
    walk.call()
    assert shown(walk).prompt.startswith("> This step is part of an iterative loop (up to 3 passes).")
    walk.call()
    assert shown(walk).prompt.startswith("Do decide.")  # the exit step has its contract instead
    walk.call(artifacts=[{"kind": "wr.loop_control", "decision": "continue"}])
    assert shown(walk).prompt.startswith("---\n**Progress: [\u2588\u2588\u2591] Pass 2 of 3**")
    assert "Focus on what the first pass missed" in shown(walk).prompt
    walk.call()
    walk.call(artifacts=[{"kind": "wr.loop_control", "decision": "continue"}])
    assert "FINAL PASS" in shown(walk).prompt and "Pass 3 of 3" in shown(walk).prompt
    assert (shown(walk).loop_id, shown(walk).iteration) == ("l", 2)


def test_a_string_body_gets_loop_variables_and_its_max_iterations() -> None:
    # WorkRail shows `[unset: currentItem]` and no bound here (a quirk, V2): WorkTrain renders them.
    workflow = build(
        [
            step("a"),
            loop("l", "each", type="forEach", items="xs", maxIterations=9),
            step("each", prompt="Handle {{currentItem}}."),
        ]
    )
    walk = Walk(workflow)
    walk.call(context={"xs": ["first"]})
    assert "Handle first." in shown(walk).prompt and "(up to 9 passes)" in shown(walk).prompt


def test_fragments_whose_condition_holds_are_appended_in_order() -> None:
    fragments = [
        {"id": "always", "text": "Always {{name}}."},
        {"id": "deep", "when": {"var": "depth", "equals": "deep"}, "text": "Go deep."},
        {"id": "quick", "when": {"var": "depth", "equals": "quick"}, "text": "Be quick."},
    ]
    walk = Walk(build([step("a"), step("b", promptFragments=fragments)]))
    walk.call(context={"depth": "DEEP", "name": "Ada"})
    assert shown(walk).prompt == "Do b.\n\nAlways Ada.\n\nGo deep."


def test_requirements_sections_for_criteria_contracts_and_assessments() -> None:
    criteria = [{"type": "contains", "value": "Scope"}, {"type": "length", "min": 10, "max": 99}]
    assessments = [
        {
            "id": "risk",
            "purpose": "Risk",
            "dimensions": [{"id": "impact", "purpose": "Blast radius", "levels": ["low", "high"]}],
        }
    ]
    workflow = build(
        [
            step(
                "a",
                validationCriteria=criteria,
                outputContract={"contractRef": "wr.contracts.loop_control"},
                assessmentRefs=["risk"],
            )
        ],
        assessments=assessments,
    )
    prompt = shown(Walk(workflow)).prompt
    assert '\n\n**OUTPUT REQUIREMENTS:**\n- Must contain: "Scope"\n- Length: ≥10 chars, ≤99 chars' in prompt
    assert "\n\n**OUTPUT REQUIREMENTS (System):**\n- Artifact contract: wr.contracts.loop_control" in prompt
    assert '{ "artifacts": [{ "kind": "wr.loop_control", "decision": "stop" }] }' in prompt
    assert "\n\n**ASSESSMENT REQUIREMENTS (System):**\n- Provide an artifact with kind" in prompt
    assert "  impact (low | high): Blast radius" in prompt and '"dimensions": { "impact": "low" }' in prompt
    assert prompt.index("OUTPUT REQUIREMENTS:") < prompt.index("(System)") < prompt.index("ASSESSMENT")


def test_agent_role_and_guidance_come_before_the_prompt() -> None:
    walk = Walk(
        build([step("a", agentRole="You are a careful reviewer.", guidance=["Cite files", "Be brief"])])
    )
    assert shown(walk).prompt == (
        "## Agent Role Instructions\nYou are a careful reviewer.\n\n"
        "## Step Guidance\n- Cite files\n- Be brief\n\nDo a."
    )


@pytest.mark.parametrize(
    ("profile", "first", "last"),
    [
        ("coding", "metrics_commit_shas", "metrics_lines_added"),
        ("review", None, "metrics_pr_numbers"),
        ("research", None, "metrics_outcome"),
        (None, None, None),
    ],
)
def test_metrics_footer(profile: str | None, first: str | None, last: str | None) -> None:
    walk = Walk(build([step("a"), step("b")], metricsProfile=profile))
    assert (first in shown(walk).prompt) if first else "METRICS" not in shown(walk).prompt
    walk.call()
    assert (last in shown(walk).prompt) if last else "METRICS" not in shown(walk).prompt


def test_parallel_steps_list_their_active_delegations() -> None:
    parallel = {
        "id": "fan",
        "type": "parallel",
        "title": "Fan out",
        "parallelDelegations": [
            {
                "workflowId": "wr.routine-x",
                "runCondition": {"var": "want", "contains": "x"},
                "contextMapping": {"packet": "factPacket"},
                "args": {"familyName": "x-family"},
            },
            {"workflowId": "wr.routine-y", "runCondition": {"var": "want", "contains": "y"}},
        ],
    }
    walk = Walk(build([step("a"), parallel, step("z")]))
    walk.call(context={"want": ["x"], "packet": "facts"})
    prompt = shown(walk).prompt
    assert "#### Subagent 1: wr.routine-x" in prompt and "wr.routine-y" not in prompt
    assert "*   **Goal**: Run x-family review family for workflow wr.routine-x" in prompt
    assert "`factPacket`: `facts`" in prompt and "`familyName`: `x-family`" in prompt
    bypassed = Walk(build([step("a"), parallel, step("z")]))
    bypassed.call(context={"want": []})
    assert shown(bypassed).prompt.startswith("# Parallel Subagent Spawning Phase (Bypassed)")


def test_meta_guidance_goes_into_the_system_prompt() -> None:
    from daemon.agent.prompt import PromptInputs, build_system_prompt

    inputs = PromptInputs("sess_x", "w", "W", 2, "g", "/ws", workflow_guidance=("Notes first.", "Be terse."))
    assert "\n\n## Workflow guidance\n- Notes first.\n- Be terse.\n" in build_system_prompt(inputs)
    assert "## Workflow guidance" not in build_system_prompt(PromptInputs("sess_x", "w", "W", 2, "g", "/ws"))
