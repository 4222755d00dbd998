"""WorkRail's structural validation of an authored workflow (`ValidationEngine.validateWorkflow`).

`structural_issues(workflow)` returns the issues WorkRail would report, in its words; any
issue makes the file skipped (with the first few as the reason). Pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from daemon.workflows.definition import (
    AssessmentDefinition,
    LoopStep,
    ParallelStep,
    TopStep,
    Workflow,
    WorkflowStep,
)

VARIABLE_NAME = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$]*$")
BINDING_TOKEN = re.compile(r"\{\{wr\.bindings\.([A-Za-z0-9_-]+)\}\}")
MAX_ITERATIONS_LIMIT = 1000


def structural_issues(workflow: Workflow) -> list[str]:
    issues = [*_extension_point_issues(workflow), *_reference_issues(workflow), *_assessment_issues(workflow)]
    seen: set[str] = set()
    for step in workflow.steps:
        if step.id in seen:
            issues.append(f"Duplicate step ID '{step.id}'")
        seen.add(step.id)
    declared = {a.id for a in workflow.assessments or ()}
    for step in workflow.steps:
        if isinstance(step, LoopStep):
            issues += [f"Step '{step.id}': {issue}" for issue in _loop_issues(step, workflow)]
            for inline in step.body if isinstance(step.body, tuple) else ():
                if isinstance(inline, WorkflowStep):
                    label = f"Loop body step '{inline.id}' in loop '{step.id}'"
                    issues += _assessment_ref_issues(inline, label, workflow, declared)
        else:
            issues += _step_issues(step, f"Step '{step.id}'")
            if isinstance(step, WorkflowStep):
                issues += _fragment_issues(step)
                issues += _assessment_ref_issues(step, f"Step '{step.id}'", workflow, declared)
    body_refs = {s.body for s in workflow.steps if isinstance(s, LoopStep) and isinstance(s.body, str)}
    for step in workflow.steps:
        if step.id in body_refs and step.runCondition:
            issues.append(f"Step '{step.id}' is a loop body but has runCondition - this may cause conflicts")
    return issues


def _step_issues(step: WorkflowStep | ParallelStep, label: str) -> list[str]:
    issues = [] if step.title else [f"{label} missing required title"]
    if isinstance(step, WorkflowStep):
        sources = sum(1 for s in (step.prompt, step.promptBlocks, step.templateCall) if s)
        if sources == 0:
            issues.append(f"{label} must have prompt, promptBlocks, or templateCall")
        if sources > 1:
            issues.append(
                f"{label} declares multiple prompt sources (prompt, promptBlocks, templateCall) — "
                "use exactly one"
            )
    return issues


def _loop_issues(step: LoopStep, workflow: Workflow) -> list[str]:
    config, issues = step.loop, []
    if config.maxIterations <= 0:
        issues.append("maxIterations must be a positive number")
    elif config.maxIterations > MAX_ITERATIONS_LIMIT:
        issues.append(f"maxIterations ({config.maxIterations}) exceeds safety limit of 1000")
    if config.type in ("while", "until") and not config.condition and not config.conditionSource:
        issues.append(f"{config.type} loop requires a condition or conditionSource")
    if config.type == "for":
        if config.count is None:
            issues.append("for loop requires a count")
        elif not isinstance(config.count, str) and config.count <= 0:
            issues.append("for loop count must be a positive number or context variable name")
    if config.type == "forEach" and not config.items:
        issues.append("forEach loop requires items")
    issues += _body_issues(step, workflow)
    for name, value in (
        ("iteration", config.iterationVar),
        ("item", config.itemVar),
        ("index", config.indexVar),
    ):
        if value and not VARIABLE_NAME.match(value):
            issues.append(f"Invalid {name} variable name '{value}'")
    return issues


def _body_issues(step: LoopStep, workflow: Workflow) -> list[str]:
    if isinstance(step.body, str):
        referenced = next((s for s in workflow.steps if s.id == step.body), None)
        if not step.body:
            return ["Loop step must have a body"]
        if referenced is None:
            return [f"Loop body references non-existent step '{step.body}'"]
        if isinstance(referenced, LoopStep):
            return [f"Nested loops are not currently supported. Step '{step.body}' is a loop"]
        return []
    issues = [] if step.body else ["Loop body array cannot be empty"]
    ids: set[str] = set()
    for inline in step.body:
        if inline.id in ids:
            issues.append(f"Duplicate step ID '{inline.id}' in loop body")
        ids.add(inline.id)
        if isinstance(inline, LoopStep):
            issues.append(f"Nested loops are not currently supported. Inline step '{inline.id}' is a loop")
            continue
        if not inline.title:
            issues.append(f"Inline step '{inline.id}' must have a title")
        if isinstance(inline, WorkflowStep) and not (
            inline.prompt or inline.promptBlocks or inline.templateCall
        ):
            issues.append(f"Inline step '{inline.id}' must have prompt, promptBlocks, or templateCall")
    return issues


def _fragment_issues(step: WorkflowStep) -> list[str]:
    issues, seen = [], set()
    for fragment in step.promptFragments:
        if not fragment.id:
            issues.append(f"Step '{step.id}': promptFragment has missing or empty id")
        elif fragment.id in seen:
            issues.append(f"Step '{step.id}': promptFragments has duplicate id '{fragment.id}'")
        seen.add(fragment.id)
        if not fragment.text:
            issues.append(
                f"Step '{step.id}': promptFragment '{fragment.id or '(unknown)'}' has missing or empty text"
            )
        elif re.search(r"\{\{wr\.", fragment.text, re.IGNORECASE):
            issues.append(
                f"Step '{step.id}': promptFragment '{fragment.id}' text contains '{{{{wr.*}}}}' token — "
                "fragments are raw text and do not support token resolution"
            )
    return issues


def _assessment_issues(workflow: Workflow) -> list[str]:
    issues: list[str] = []
    seen: set[str] = set()
    for assessment in workflow.assessments or ():
        if not assessment.id:
            issues.append("Assessment definition has missing or empty id")
            continue
        if assessment.id in seen:
            issues.append(f"assessments has duplicate id '{assessment.id}'")
        seen.add(assessment.id)
        if not assessment.purpose:
            issues.append(f"Assessment '{assessment.id}': purpose must be a non-empty string")
        if not assessment.dimensions:
            issues.append(f"Assessment '{assessment.id}': dimensions must contain at least one dimension")
        issues += _dimension_issues(assessment)
    return issues


def _dimension_issues(assessment: AssessmentDefinition) -> list[str]:
    issues, seen, label = [], set(), f"Assessment '{assessment.id}'"
    for dimension in assessment.dimensions:
        if not dimension.id:
            issues.append(f"{label}: dimension has missing or empty id")
            continue
        if dimension.id in seen:
            issues.append(f"{label}: dimensions has duplicate id '{dimension.id}'")
        seen.add(dimension.id)
        where = f"{label} dimension '{dimension.id}'"
        if not dimension.purpose:
            issues.append(f"{where}: purpose must be a non-empty string")
        if len(dimension.levels) < 2:
            issues.append(f"{where}: levels must contain at least two values")
            continue
        if any(not level for level in dimension.levels):
            issues.append(f"{where}: levels must be non-empty strings")
        for level in _duplicates(dimension.levels):
            issues.append(f"{where}: levels has duplicate value '{level}'")
    return issues


def _assessment_ref_issues(
    step: WorkflowStep, label: str, workflow: Workflow, declared: set[str]
) -> list[str]:
    issues: list[str] = []
    if step.assessmentRefs is not None:
        if not step.assessmentRefs:
            issues.append(f"{label}: assessmentRefs must not be empty when declared")
        if not declared:
            return [*issues, f"{label}: declares assessmentRefs but workflow declares no assessments"]
        for ref in _duplicates(step.assessmentRefs):
            issues.append(f"{label}: assessmentRefs has duplicate value '{ref}'")
        for ref in step.assessmentRefs:
            if ref not in declared:
                issues.append(
                    f"{label}: assessmentRef '{ref}' references undeclared assessment. "
                    f"Declared assessments: [{', '.join(sorted(declared))}]"
                )
    return issues + _consequence_issues(step, label, workflow)


def _consequence_issues(step: WorkflowStep, label: str, workflow: Workflow) -> list[str]:
    consequences = step.assessmentConsequences
    if consequences is None:
        return []
    if not consequences:
        return [f"{label}: assessmentConsequences must not be empty when declared"]
    refs = step.assessmentRefs or ()
    if not refs:
        return [f"{label}: assessmentConsequences require at least one assessmentRef on the same step"]
    referenced = [a for a in workflow.assessments or () if a.id in refs]
    issues: list[str] = []
    for consequence in consequences if referenced else ():
        trigger, level = consequence.when, consequence.when.anyEqualsLevel
        if trigger.forAssessment is not None and trigger.forAssessment not in refs:
            issues.append(
                f"{label}: assessment consequence forAssessment '{trigger.forAssessment}' is not "
                "in the step's assessmentRefs"
            )
        elif trigger.forAssessment is not None:
            scoped = [
                lv
                for a in referenced
                if a.id == trigger.forAssessment
                for d in a.dimensions
                for lv in d.levels
            ]
            if level not in scoped:
                issues.append(
                    f"{label}: assessment consequence anyEqualsLevel '{level}' is not declared in "
                    f"assessment '{trigger.forAssessment}'"
                )
        elif level not in [lv for a in referenced for d in a.dimensions for lv in d.levels]:
            issues.append(
                f"{label}: assessment consequence anyEqualsLevel '{level}' is not declared in any "
                "dimension of any referenced assessment"
            )
        if consequence.effect.kind != "require_followup":
            issues.append(f"{label}: unsupported assessment consequence effect '{consequence.effect.kind}'")
        if not consequence.effect.guidance:
            issues.append(f"{label}: assessment consequence guidance must be a non-empty string")
    return issues


def _extension_point_issues(workflow: Workflow) -> list[str]:
    issues, seen = [], set()
    for point in workflow.extensionPoints:
        if not point.slotId:
            issues.append("extensionPoints entry has missing or empty slotId")
        elif not point.purpose:
            issues.append(f"extensionPoints[{point.slotId}]: purpose must be a non-empty string")
        elif not point.default:
            issues.append(f"extensionPoints[{point.slotId}]: default must be a non-empty string")
        if point.slotId and point.slotId in seen:
            issues.append(f"extensionPoints has duplicate slotId '{point.slotId}'")
        seen.add(point.slotId)
    declared = {p.slotId for p in workflow.extensionPoints if p.slotId}
    for step in _all_steps(workflow.steps):
        for slot in BINDING_TOKEN.findall(_step_text(step)):
            if not workflow.extensionPoints:
                issues.append(
                    f"Step '{step.id}': uses {{{{wr.bindings.*}}}} token but workflow declares no "
                    "extensionPoints"
                )
                break
            if slot not in declared:
                issues.append(
                    f"Step '{step.id}': binding token '{{{{wr.bindings.{slot}}}}}' references "
                    "undeclared slot. "
                    f"Declared slots: [{', '.join(sorted(declared))}]"
                )
    return issues


def _reference_issues(workflow: Workflow) -> list[str]:
    issues, seen = [], set()
    for ref in workflow.references or ():
        ref_id = ref.get("id")
        if not ref_id or not isinstance(ref_id, str):
            issues.append("Workflow reference has missing or empty id")
        elif ref_id in seen:
            issues.append(f"Workflow reference has duplicate id '{ref_id}'")
        seen.add(ref_id)
        for key in ("title", "source", "purpose"):
            if not ref.get(key) or not isinstance(ref.get(key), str):
                issues.append(f"Workflow reference '{ref_id or '(unknown)'}' has missing or empty {key}")
        if not isinstance(ref.get("authoritative"), bool):
            issues.append(
                f"Workflow reference '{ref_id or '(unknown)'}' has missing or non-boolean authoritative field"
            )
    return issues


def _all_steps(steps: Iterable[TopStep]) -> Iterable[TopStep]:
    for step in steps:
        yield step
        if isinstance(step, LoopStep) and isinstance(step.body, tuple):
            yield from _all_steps(step.body)


def _step_text(step: TopStep) -> str:
    """The authored text of a step where `{{wr.bindings.*}}` tokens may appear."""
    if not isinstance(step, WorkflowStep):
        return ""
    parts = [step.prompt or ""]
    if blocks := step.promptBlocks:
        values = [blocks.goal, *blocks.constraints, *blocks.procedure, *blocks.verify]
        parts += [v for v in values if isinstance(v, str)] + list(blocks.outputRequired.values())
    return "\n".join(parts)


def _duplicates(values: Iterable[str]) -> list[str]:
    seen: set[str] = set()
    repeated: list[str] = []
    for value in values:
        if value in seen and value not in repeated:
            repeated.append(value)
        seen.add(value)
    return repeated
