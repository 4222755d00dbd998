"""What the agent sees of a step (SEMANTICS §3.2, WorkRail's `renderPendingPrompt`). Pure.

A step's text is, in order: the loop banner, the agent role and guidance, the prompt with
its `{{var}}` templates filled, the output requirements (validationCriteria, the artifact
contract, the assessments), the promptFragments whose `when` holds, and the metrics footer.
The context is the session's, plus the loop variables of the iteration.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from daemon.workflows import conditions, texts
from daemon.workflows.compiled import CompiledLoop, CompiledWorkflow, is_exit_step
from daemon.workflows.definition import AssessmentDefinition, ParallelStep, WorkflowStep
from daemon.workflows.js import js_string, js_typeof
from daemon.workflows.texts import contract_instructions, metrics_footer

TEMPLATE = re.compile(r"\{\{(?!wr\.)([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)\}\}")
LoopPath = tuple[tuple[str, int], ...]  # ((loopId, iteration), ...), iteration 0-based


@dataclass(frozen=True)
class Presented:
    """A step as the agent gets it."""

    step_id: str
    title: str
    prompt: str
    loop_id: str | None = None
    iteration: int | None = None  # 0-based


def fill_templates(template: str, context: Mapping[str, Any]) -> str:
    """`{{a.b}}` -> JS String() of the value; missing shows `[unset: a.b]` (context-template-resolver.ts)."""
    if "{{" not in template:
        return template
    return TEMPLATE.sub(lambda match: _resolve(match.group(1), context), template)


_MISSING = object()  # JS `undefined`, as opposed to a JSON null


def _resolve(path: str, context: Mapping[str, Any]) -> str:
    keys = path.split(".")
    current: Any = context.get(keys[0])
    if current is None:
        return f"[unset: {path}]"
    for i, key in enumerate(keys[1:], start=1):
        if not isinstance(current, dict | list):
            kind, preview = _js_type(current), "undefined" if current is _MISSING else js_string(current)
            preview = preview[:60] + "…" if len(preview) > 60 else preview
            return f"[unset: {path} -- '{'.'.join(keys[:i])}' is {kind} (\"{preview}\"), not object]"
        if isinstance(current, list):
            current = len(current) if key == "length" else _MISSING
        else:
            current = current.get(key, _MISSING)
    return f"[unset: {path}]" if current is None or current is _MISSING else js_string(current)


def _js_type(value: Any) -> str:
    return "undefined" if value is _MISSING else js_typeof(value)


def loop_variables(loop: CompiledLoop, iteration: int, context: Mapping[str, Any]) -> dict[str, Any]:
    """`currentIteration` (1-based) and, for forEach, `currentItem` and `currentIndex`."""
    config = loop.step.loop
    out: dict[str, Any] = {config.iterationVar or "currentIteration": iteration + 1}
    items = context.get(config.items) if config.type == "forEach" and config.items else None
    if isinstance(items, list):
        out[config.itemVar or "currentItem"] = items[iteration] if iteration < len(items) else None
        out[config.indexVar or "currentIndex"] = iteration
    return out


def render(
    workflow: CompiledWorkflow, step_id: str, loop_path: LoopPath, context: Mapping[str, Any]
) -> Presented:
    """The step `step_id` at `loop_path`, rendered against the session context."""
    step = workflow.runnable[step_id]
    loop = workflow.parent_loop.get(step_id) if loop_path else None
    iteration = loop_path[-1][1] if loop_path else None
    scope = dict(context)
    if loop is not None and iteration is not None:
        # Decision: loop variables also for `body: "step-id"` bodies (WorkRail: inline only,
        # a quirk that shows `[unset: currentItem]`; docs/workflows.md).
        scope.update(loop_variables(loop, iteration, context))
    title = fill_templates(step.title, scope)
    loop_id = loop.id if loop else None
    if isinstance(step, ParallelStep):
        return Presented(step_id, title, parallel_prompt(step, scope), loop_id, iteration)
    banner = loop is not None and iteration is not None and not is_exit_step(step)
    contract = step.outputContract
    parts = [
        loop_banner(iteration or 0, loop.max_iterations) if banner and loop else "",
        role_and_guidance(step),
        fill_templates(step.prompt or "", scope),
        _section("OUTPUT REQUIREMENTS", validation_requirements(step.validationCriteria)),
        _section(
            "OUTPUT REQUIREMENTS (System)", contract_instructions(contract.contractRef) if contract else []
        ),
        _section("ASSESSMENT REQUIREMENTS (System)", assessment_requirements(assessments_of(workflow, step))),
        fragments(step, scope),
        metrics_footer(workflow.workflow.metricsProfile, step_id in workflow.last_step_ids),
    ]
    return Presented(step_id, title, "".join(parts), loop_id, iteration)


def _section(heading: str, lines: Sequence[str]) -> str:
    return f"\n\n**{heading}:**\n" + "\n".join(f"- {line}" for line in lines) if lines else ""


def loop_banner(iteration: int, max_iterations: int) -> str:
    """WorkRail's banner of a loop body step (not shown on the loop's decision step)."""
    if iteration == 0:
        return texts.LOOP_FIRST_PASS.format(max=max_iterations)
    number = iteration + 1
    filled = min(number, max_iterations)
    bar = "\u2588" * filled + "\u2591" * max(max_iterations - filled, 0)
    if iteration <= 1:
        scope = texts.SCOPE_SECOND_PASS
    elif iteration + 1 >= max_iterations:
        scope = texts.SCOPE_FINAL_PASS
    else:
        scope = texts.SCOPE_MIDDLE_PASS
    return texts.LOOP_LATER_PASS.format(bar=bar, number=number, max=max_iterations, scope=scope)


def role_and_guidance(step: WorkflowStep) -> str:
    """WorkRail v2 shows neither; WorkTrain uses its v1 layout so the agent sees both."""
    text = f"## Agent Role Instructions\n{step.agentRole}\n\n" if step.agentRole else ""
    if step.guidance:
        text += "## Step Guidance\n" + "".join(f"- {line}\n" for line in step.guidance) + "\n"
    return text


def validation_requirements(criteria: Any) -> list[str]:
    """WorkRail's requirement lines (at most 5), for every form of validationCriteria.

    WorkRail prints nothing for the array form, the form all its files use, though it gates
    the step (a quirk, SEMANTICS §9); WorkTrain shows what it will check.
    """
    rules: list[Any] = []

    def collect(node: Any) -> None:
        if isinstance(node, list):
            for item in node:
                collect(item)
        elif isinstance(node, dict) and "type" in node:
            rules.append(node)
        elif isinstance(node, dict) and isinstance(node.get("and"), list):
            collect(node["and"])

    collect(criteria)
    return [line for rule in rules if (line := _rule_line(rule))][:5]


def _rule_line(rule: dict[str, Any]) -> str | None:
    kind = rule.get("type")
    if kind == "contains" and rule.get("value"):
        return f'Must contain: "{rule["value"]}"'
    if kind == "regex" and rule.get("pattern"):
        flags = f" (flags: {rule['flags']})" if rule.get("flags") else ""
        return f"Must match pattern: {rule['pattern']}{flags}"
    if kind == "length":
        bounds = [
            f"≥{rule['min']} chars" if "min" in rule else "",
            f"≤{rule['max']} chars" if "max" in rule else "",
        ]
        bounds = [b for b in bounds if b]
        return f"Length: {', '.join(bounds)}" if bounds else None
    return None


def assessments_of(workflow: CompiledWorkflow, step: WorkflowStep) -> list[AssessmentDefinition]:
    refs = step.assessmentRefs or ()
    return [a for a in workflow.workflow.assessments or () if a.id in refs]


def assessment_requirements(assessments: Sequence[AssessmentDefinition]) -> list[str]:
    lines: list[str] = []
    for assessment in assessments:
        lines.append(texts.ASSESSMENT_KIND)
        if len(assessments) > 1:
            lines.append(texts.ASSESSMENT_ID.format(id=assessment.id))
        lines += [f'Assessment target: "{assessment.id}"', f"Purpose: {assessment.purpose}", "Dimensions:"]
        lines += [f"  {d.id} ({' | '.join(d.levels)}): {d.purpose}" for d in assessment.dimensions]
        first = assessment.dimensions[0] if assessment.dimensions else None
        key = f'"{first.id}"' if first else '"dimensionId"'
        value = f'"{first.levels[0] if first and first.levels else "high"}"'
        lines += [
            texts.ASSESSMENT_EXAMPLE.format(id=assessment.id, key=key, value=value),
            texts.ASSESSMENT_LEVELS,
        ]
    return lines


def fragments(step: WorkflowStep, scope: Mapping[str, Any]) -> str:
    texts = [
        fill_templates(f.text, scope) for f in step.promptFragments if conditions.evaluate(f.when, scope)
    ]
    return "\n\n" + "\n\n".join(texts) if texts else ""


def parallel_prompt(step: ParallelStep, scope: Mapping[str, Any]) -> str:
    """The delegations whose runCondition holds, each with its goal and inputs."""
    active = [d for d in step.parallelDelegations if conditions.evaluate(d.runCondition, scope)]
    if not active:
        return texts.PARALLEL_BYPASSED
    blocks = []
    for n, delegation in enumerate(active, start=1):
        mapped = delegation.contextMapping.items()
        inputs = {
            child: js_string(scope[parent]) for parent, child in mapped if scope.get(parent) is not None
        }
        inputs.update((key, js_string(value)) for key, value in delegation.args.items())
        family = delegation.args.get("familyName")
        goal = delegation.goal or (
            f"Run {family} review family for workflow {delegation.workflowId}"
            if family
            else f"Run {delegation.workflowId}"
        )
        listed = (
            "\n".join(f"    *   `{k}`: `{v}`" for k, v in inputs.items()) or "    *   *(No input parameters)*"
        )
        tools = (
            f"*   **Allowed Tools**: {', '.join(delegation.allowedTools)}\n"
            if delegation.allowedTools
            else ""
        )
        blocks.append(
            texts.PARALLEL_DELEGATION.format(
                n=n, workflow=delegation.workflowId, goal=goal, tools=tools, inputs=listed
            )
        )
    return texts.PARALLEL_HEADER + "\n\n".join(blocks) + texts.PARALLEL_PROCEDURE
