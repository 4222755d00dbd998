"""What keeps a step from completing (SEMANTICS §4, WorkRail's advance core). Pure.

`blocking_reasons` checks one `continue_workflow` call's output against the pending step:
- the output requirement: the `outputContract` artifact if the step has one (then nothing
  else is consulted), else the `assessmentRefs` artifacts, else `validationCriteria` run
  on the notes;
- notes, unless `notesOptional` or an outputContract;
- `assessmentConsequences`: a submitted level that asks for a follow-up.
Any reason blocks: the step stays pending and the call's context is not kept.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from daemon.workflows import conditions
from daemon.workflows.artifacts import Assessment, DimensionLevel, check_contract, kind_of, parse_assessment
from daemon.workflows.compiler import REGEX_FLAGS
from daemon.workflows.definition import AssessmentDefinition, RunStep, WorkflowStep


@dataclass(frozen=True)
class Reason:
    """One reason a step is blocked, with what would fix it."""

    code: str  # MISSING_REQUIRED_OUTPUT | INVALID_REQUIRED_OUTPUT | MISSING_REQUIRED_NOTES | ...
    message: str
    issues: tuple[str, ...] = ()
    suggestions: tuple[str, ...] = ()

    def as_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.issues:
            data["issues"] = list(self.issues)
        if self.suggestions:
            data["suggestions"] = list(self.suggestions)
        return data


@dataclass(frozen=True)
class Recorded:
    """An accepted assessment: its id and each dimension's canonical level."""

    assessment_id: str
    levels: dict[str, str] = field(default_factory=dict)


def blocking_reasons(
    step: RunStep,
    assessments: Sequence[AssessmentDefinition],
    notes: str,
    artifacts: list[Any],
    context: Mapping[str, Any],
) -> list[Reason]:
    if not isinstance(step, WorkflowStep):  # a parallel step only needs notes
        return [] if step.notesOptional or notes.strip() else [_missing_notes(step.id)]
    defined = [a for a in assessments if a.id in (step.assessmentRefs or ())]
    assessment_problems, recorded = check_assessments(step, defined, artifacts)
    reasons = _output_requirement(step, notes, artifacts, context, assessment_problems)
    if not (step.notesOptional or step.outputContract is not None) and not notes.strip():
        reasons.append(_missing_notes(step.id))
    return reasons + followups(step, recorded)


def _output_requirement(
    step: WorkflowStep,
    notes: str,
    artifacts: list[Any],
    context: Mapping[str, Any],
    assessment_problems: tuple[tuple[str, ...], tuple[str, ...]],
) -> list[Reason]:
    """The first of: the outputContract, the assessments, the validationCriteria."""
    if step.outputContract is not None:
        check = check_contract(artifacts, step.outputContract)
        if check.status == "missing":
            fix = (f"Provide the {step.outputContract.contractRef} artifact.",)
            return [Reason("MISSING_REQUIRED_OUTPUT", check.message, (), fix)]
        if check.status == "invalid":
            fix = ("Provide a valid artifact matching the contract schema",)
            return [Reason("INVALID_REQUIRED_OUTPUT", check.message, check.issues, fix)]
        return []
    if step.assessmentRefs:
        issues, fixes = assessment_problems
        message = "The assessment artifact is missing or invalid."
        return [Reason("INVALID_REQUIRED_OUTPUT", message, issues, fixes)] if issues else []
    if step.validationCriteria is None:
        return []
    if not notes:
        return [Reason("MISSING_REQUIRED_OUTPUT", "This step checks your notes, and there are none.")]
    failed = check_criteria(step.validationCriteria, notes, context)
    message = "Your notes do not meet this step's output requirements."
    fix = ("Revise your notes so that they meet every requirement, then call continue_workflow again.",)
    return [Reason("INVALID_REQUIRED_OUTPUT", message, tuple(failed), fix)] if failed else []


def _missing_notes(step_id: str) -> Reason:
    return Reason("MISSING_REQUIRED_NOTES", f"Step '{step_id}' requires notes on what you did.")


# --- assessments (assessment-validation.ts, assessment-consequences.ts) -----------------------


def check_assessments(
    step: WorkflowStep, defined: Sequence[AssessmentDefinition], artifacts: list[Any]
) -> tuple[tuple[tuple[str, ...], tuple[str, ...]], list[Recorded]]:
    """((issues, suggestions), the assessments recorded when all of them are valid)."""
    if not step.assessmentRefs:
        return ((), ()), []
    submitted = [a for a in artifacts if kind_of(a) == "wr.assessment"]
    issues: list[str] = []
    suggestions: list[str] = []
    recorded: list[Recorded] = []
    for definition in defined:
        result = _check_one(definition, submitted, single=len(step.assessmentRefs) == 1)
        if isinstance(result, Recorded):
            recorded.append(result)
        else:
            issues += result[0]
            suggestions += result[1]
    return (tuple(issues), tuple(suggestions)), ([] if issues else recorded)


def _check_one(
    definition: AssessmentDefinition, submitted: list[Any], single: bool
) -> Recorded | tuple[list[str], list[str]]:
    levels_hint = ", ".join(f"{d.id} ({' | '.join(d.levels)})" for d in definition.dimensions)
    if not submitted:
        return [f'This step requires an assessment submission for "{definition.id}".'], [
            f'Provide an artifact with kind "wr.assessment" for assessment "{definition.id}".',
            f"Include dimension values for: {levels_hint}.",
        ]
    if single:
        candidate: Any = submitted[0]
    else:
        candidate = next(
            (a for a in submitted if (p := parse_assessment(a)) and p.assessmentId == definition.id), None
        )
        if candidate is None:
            return [
                f'Missing assessment artifact for "{definition.id}". Provide an artifact with kind '
                '"wr.assessment" '
                f'and assessmentId "{definition.id}".'
            ], [f"Include dimension values for: {levels_hint}."]
    parsed = parse_assessment(candidate)
    if parsed is None:
        return ["Assessment artifact is malformed or does not match the expected shape."], [
            'Use an artifact with kind "wr.assessment", a dimensions object, and canonical '
            "dimension values for "
            f'assessment "{definition.id}".'
        ]
    if parsed.assessmentId and parsed.assessmentId != definition.id:
        return [
            f'Assessment artifact targets "{parsed.assessmentId}", but this step expects "{definition.id}".'
        ], [f'Set assessmentId to "{definition.id}" or omit it and provide the correct dimensions.']
    return _check_dimensions(definition, parsed)


def _check_dimensions(
    definition: AssessmentDefinition, parsed: Assessment
) -> Recorded | tuple[list[str], list[str]]:
    issues: list[str] = []
    suggestions: list[str] = []
    levels: dict[str, str] = {}
    for dimension in definition.dimensions:
        value = parsed.dimensions.get(dimension.id)
        allowed = ", ".join(dimension.levels)
        if value is None:
            if dimension.required:
                issues.append(f'Missing assessment dimension "{dimension.id}".')
                suggestions.append(f'Provide a value for "{dimension.id}". Allowed levels: {allowed}.')
            continue
        level = value.level if isinstance(value, DimensionLevel) else value
        matches = [c for c in dimension.levels if c == level] or [
            c for c in dimension.levels if c.lower() == level.strip().lower()
        ]
        if len(matches) == 1:
            levels[dimension.id] = matches[0]
            continue
        problem = "is ambiguous for this dimension" if matches else "is not allowed"
        issues.append(f'Dimension "{dimension.id}": Level "{level}" {problem}. Allowed levels: {allowed}.')
        suggestions.append(f'Use one of the canonical levels for "{dimension.id}": {allowed}.')
    known = {d.id for d in definition.dimensions}
    for extra in (d for d in parsed.dimensions if d not in known):
        issues.append(f'Unknown assessment dimension "{extra}" for assessment "{definition.id}".')
        suggestions.append(f'Remove "{extra}" and use only: {", ".join(sorted(known))}.')
    return (issues, suggestions) if issues else Recorded(definition.id, levels)


def followups(step: WorkflowStep, recorded: list[Recorded]) -> list[Reason]:
    """Each consequence whose level was submitted (for its assessment, if it names one)."""
    reasons = []
    for consequence in step.assessmentConsequences or ():
        scope = consequence.when.forAssessment
        for assessment in (r for r in recorded if scope is None or r.assessment_id == scope):
            hit = next(
                (d for d, level in assessment.levels.items() if level == consequence.when.anyEqualsLevel),
                None,
            )
            if hit is not None:
                message = (
                    f"Assessment follow-up required: {assessment.assessment_id}.{hit} == "
                    f"{consequence.when.anyEqualsLevel}. {consequence.effect.guidance}"
                )
                reasons.append(Reason("ASSESSMENT_FOLLOWUP_REQUIRED", message))
                break
    return reasons


# --- validationCriteria on the notes (validation-engine.ts) ------------------------------------


def check_criteria(criteria: Any, notes: str, context: Mapping[str, Any]) -> list[str]:
    """The issues of `notes` under a rule, a list of rules, or an and/or/not composition."""
    if isinstance(criteria, list):
        return [issue for rule in criteria if _applies(rule, context) for issue in _rule_issues(rule, notes)]
    if isinstance(criteria, dict) and "type" in criteria:
        return check_criteria([criteria], notes, context)
    return [] if _composition(criteria, notes, context) else ["Validation composition failed"]


def _applies(rule: Any, context: Mapping[str, Any]) -> bool:
    return not (
        isinstance(rule, dict)
        and rule.get("condition")
        and not conditions.evaluate(rule["condition"], context)
    )


def _composition(node: Any, notes: str, context: Mapping[str, Any]) -> bool:
    if isinstance(node, dict) and "type" in node:
        return not _applies(node, context) or not _rule_issues(node, notes)
    if not isinstance(node, dict):
        return False
    if isinstance(node.get("and"), list):
        return all(_composition(n, notes, context) for n in node["and"])
    if isinstance(node.get("or"), list):
        return any(_composition(n, notes, context) for n in node["or"])
    if "not" in node:
        return not _composition(node["not"], notes, context)
    return True  # an empty composition is valid


def _rule_issues(rule: dict[str, Any], notes: str) -> list[str]:
    kind, message = rule.get("type"), rule.get("message")
    if kind == "contains":
        value = rule.get("value")
        if not isinstance(value, str) or value not in notes:
            return [message or f"Output must include: {value}"]
    elif kind == "regex":
        flags = 0
        for flag in str(rule.get("flags") or ""):
            flags |= REGEX_FLAGS[flag]
        if not re.search(str(rule.get("pattern", "")), notes, flags):
            return [message or f"Pattern mismatch: {rule.get('pattern')}"]
    elif kind == "length":
        low, high = rule.get("min"), rule.get("max")
        issues = []
        if isinstance(low, int | float) and len(notes) < low:
            issues.append(message or f"Output shorter than minimum length {low}")
        if isinstance(high, int | float) and len(notes) > high:
            issues.append(message or f"Output exceeds maximum length {high}")
        return issues
    return []
