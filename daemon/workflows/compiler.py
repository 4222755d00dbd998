"""From an authored workflow to one that runs (SEMANTICS §3.1, docs/durability.md; WorkRail's compiler).

`compile_workflow(workflow, routines)` checks the file as WorkRail does (its structural
validation, then its compiler's rules) and runs its authoring passes in its order:
templateCall expansion -> `{{wr.bindings.*}}` -> features -> `wr.refs` -> promptBlocks
rendered to `prompt` -> no `{{wr.*}}` left. Any problem raises `WorkflowError` with the
reason WorkRail would give (or WorkTrain's, for what it does not support). Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from daemon.workflows.artifacts import CONTRACTS, LOOP_CONTROL
from daemon.workflows.compiled import CompiledLoop, CompiledWorkflow, is_exit_step
from daemon.workflows.definition import (
    ArtifactSource,
    ContextSource,
    LoopStep,
    ParallelStep,
    PromptBlocks,
    PromptValue,
    RefPart,
    RunStep,
    TextPart,
    TopStep,
    Workflow,
    WorkflowStep,
)
from daemon.workflows.js import js_string
from daemon.workflows.texts import FEATURES, REFS
from daemon.workflows.validation import BINDING_TOKEN, structural_issues

ROUTINE_TEMPLATE_PREFIX = "wr.templates.routine."
SINGLE_BRACE_ARG = re.compile(r"(?<!\{)\{([^{}]+)\}(?!\})")  # {arg}, never {{context}}
AUTHORED_NUMBER = re.compile(r"^\s*\d+[.)]\s+")
SHOWN_ISSUES = 3
QUOTED_LIST = "', '"
REGEX_FLAGS = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL, "g": 0, "u": 0, "y": 0, "d": 0}


class WorkflowError(ValueError):
    """Why a workflow file cannot run (the catalog lists it as skipped with this reason)."""


def template_id(routine_id: str) -> str:
    """`wr.routine-X` (or `routine-X`, or `X`) -> `wr.templates.routine.X` (template-registry.ts)."""
    for prefix in ("wr.routine-", "routine-"):
        if routine_id.startswith(prefix):
            return ROUTINE_TEMPLATE_PREFIX + routine_id.removeprefix(prefix)
    return ROUTINE_TEMPLATE_PREFIX + routine_id


def compile_workflow(workflow: Workflow, routines: Mapping[str, Workflow] | None = None) -> CompiledWorkflow:
    """`routines`: template id -> routine workflow (the catalog's `wr.routine-*` workflows)."""
    issues = structural_issues(workflow) + _unsupported(workflow)
    if issues:
        more = f" (and {len(issues) - SHOWN_ISSUES} more)" if len(issues) > SHOWN_ISSUES else ""
        raise WorkflowError("; ".join(issues[:SHOWN_ISSUES]) + more)
    first = workflow.steps[0]
    if isinstance(first, WorkflowStep) and first.templateCall:
        raise WorkflowError(
            f"Step '{first.id}' from authored workflow steps[0] not found in executable workflow "
            "(a workflow cannot start with a templateCall)"
        )
    steps = _expand_templates(workflow.steps, routines or {})
    bindings = {p.slotId: p.default for p in workflow.extensionPoints}
    steps = tuple(_map_runnable(step, lambda s: _finish_step(s, workflow, bindings)) for step in steps)
    _check_ids(steps, workflow.id)
    _check_contracts_and_assessments(steps, workflow)
    loops = {step.id: _compile_loop(step, steps) for step in steps if isinstance(step, LoopStep)}
    return CompiledWorkflow(workflow=workflow, steps=steps, loops=loops)


def _unsupported(workflow: Workflow) -> list[str]:
    """What WorkTrain refuses although WorkRail's schema allows it (none of its 48 files use it)."""
    issues = []
    for step in _runnable_steps(workflow.steps):
        if isinstance(step, ParallelStep):
            if step.synthesis is not None:
                issues.append(f"Step '{step.id}': parallel `synthesis` steps are not supported by WorkTrain")
            continue
        if step.verification is not None or step.audit is not None:
            issues.append(f"Step '{step.id}': `verification`/`audit` steps are not supported by WorkTrain")
        issues += [f"Step '{step.id}': {problem}" for problem in _criteria_problems(step.validationCriteria)]
    for loop in workflow.steps:
        if isinstance(loop, LoopStep) and not float(loop.loop.maxIterations).is_integer():
            issues.append(
                f"Step '{loop.id}': maxIterations must be a whole number (WorkRail fails such a "
                "loop at run time)"
            )
    return issues


def _criteria_problems(criteria: Any) -> list[str]:
    if criteria is None:
        return []
    if isinstance(criteria, list):
        return [p for rule in criteria for p in _criteria_problems(rule)]
    if not isinstance(criteria, dict):
        return ["validationCriteria must be a rule, a list of rules or an and/or/not composition"]
    if "type" not in criteria:
        parts = [criteria[k] for k in ("and", "or") if isinstance(criteria.get(k), list)]
        nested = [r for part in parts for r in part] + ([criteria["not"]] if "not" in criteria else [])
        return [p for rule in nested for p in _criteria_problems(rule)]
    kind = criteria["type"]
    if kind == "schema":
        return ["validationCriteria rule type 'schema' is not supported by WorkTrain"]
    if kind not in ("contains", "regex", "length"):
        return [f"Unsupported validation rule type: {kind}"]
    if kind == "regex":
        flags = str(criteria.get("flags") or "")
        if any(f not in REGEX_FLAGS for f in flags):
            return [f"Invalid regex flags in validationCriteria: {flags!r}"]
        try:
            re.compile(str(criteria.get("pattern", "")))
        except re.error as exc:
            return [f"Invalid regex pattern in validationCriteria: {exc}"]
    return []


# --- templateCall (docs/workflows.md) -----------------------------------------------------------------------


def _expand_templates(steps: tuple[TopStep, ...], routines: Mapping[str, Workflow]) -> tuple[TopStep, ...]:
    out: list[TopStep] = []
    seen: set[str] = set()

    def emit(step: TopStep, template: str | None, into: list[Any]) -> None:
        if step.id in seen:
            origin = f" (from template '{template}')" if template else ""
            raise WorkflowError(f"Duplicate step id '{step.id}' after template expansion{origin}")
        seen.add(step.id)
        into.append(step)

    for step in steps:
        if isinstance(step, LoopStep) and isinstance(step.body, tuple):
            body: list[Any] = []
            for inline in step.body:
                for expanded in _expand(inline, routines):
                    emit(expanded, _template_of(inline), body)
            emit(step.model_copy(update={"body": tuple(body)}), None, out)
        else:
            for expanded in _expand(step, routines):
                emit(expanded, _template_of(step), out)
    return tuple(out)


def _template_of(step: TopStep) -> str | None:
    return step.templateCall.templateId if isinstance(step, WorkflowStep) and step.templateCall else None


def _expand(step: TopStep, routines: Mapping[str, Workflow]) -> list[TopStep]:
    if not isinstance(step, WorkflowStep) or step.templateCall is None:
        return [step]
    call = step.templateCall
    routine = routines.get(call.templateId)
    if routine is None:
        known = ", ".join(sorted(routines)) or "(none)"
        raise WorkflowError(
            f"Step '{step.id}': template error — Unknown template '{call.templateId}'. Known "
            f"templates: {known}"
        )
    expanded: list[TopStep] = []
    for inner in routine.steps:
        if not isinstance(inner, WorkflowStep) or not inner.prompt:
            raise WorkflowError(
                f"Step '{step.id}': template expansion error — Routine '{routine.id}' step '{inner.id}' "
                "is missing required field 'prompt'."
            )
        where = (call.templateId, routine.id, inner.id, step.id)
        expanded.append(
            inner.model_copy(
                update={
                    "id": f"{step.id}.{inner.id}",
                    "title": _substitute(inner.title, call.args, *where),
                    "prompt": _substitute(inner.prompt, call.args, *where),
                    "guidance": (*inner.guidance, *routine.metaGuidance),
                    "runCondition": inner.runCondition or step.runCondition,
                }
            )
        )
    return expanded


def _substitute(
    text: str, args: Mapping[str, Any], template: str, routine: str, step: str, caller: str
) -> str:
    missing = [m for m in SINGLE_BRACE_ARG.findall(text) if m not in args]
    if missing:
        raise WorkflowError(
            f"Step '{caller}': template expansion error — MISSING_TEMPLATE_ARG: routine '{routine}' step "
            f"'{step}' references arg(s) '{QUOTED_LIST.join(missing)}' but they were not provided "
            "in templateCall.args"
        )
    bad = [m for m in SINGLE_BRACE_ARG.findall(text) if not isinstance(args[m], str | int | float)]
    if bad:
        raise WorkflowError(
            f"Step '{caller}': template expansion error — INVALID_TEMPLATE_ARG_TYPE: routine "
            f"'{routine}' step "
            f"'{step}' arg(s) '{QUOTED_LIST.join(bad)}' must be string, number, or boolean (got "
            "non-primitive)"
        )
    return SINGLE_BRACE_ARG.sub(lambda m: js_string(args[m.group(1)]), text)


# --- bindings, features, refs, promptBlocks (README's HTTP API) --------------------------------------------


def _map_runnable(step: TopStep, change: Any) -> TopStep:
    if isinstance(step, LoopStep):
        body = tuple(change(s) for s in step.body) if isinstance(step.body, tuple) else step.body
        return step.model_copy(update={"body": body})
    return change(step)  # type: ignore[no-any-return]


def _finish_step(step: RunStep, workflow: Workflow, bindings: Mapping[str, str]) -> RunStep:
    if isinstance(step, ParallelStep):
        return step
    blocks = step.promptBlocks
    if step.prompt and blocks is not None:
        raise WorkflowError(f"Step '{step.id}' declares both prompt and promptBlocks. Use exactly one.")
    prompt = _bind(step.prompt or "", bindings)
    if blocks is not None:
        blocks = _apply_features(blocks, workflow.features)
        prompt = _bind(render_blocks(blocks, step.id), bindings)
    if token := re.search(r"\{\{wr\.[^}]*\}\}", prompt):
        raise WorkflowError(
            f"Step '{step.id}': compiled prompt contains unresolved token '{token.group(0)}'."
        )
    return step.model_copy(update={"prompt": prompt, "promptBlocks": None})


def _bind(text: str, bindings: Mapping[str, str]) -> str:
    return BINDING_TOKEN.sub(lambda m: bindings.get(m.group(1), m.group(0)), text)


def _apply_features(blocks: PromptBlocks, features: tuple[str, ...]) -> PromptBlocks:
    lists: dict[str, list[Any]] = {
        "constraints": list(blocks.constraints),
        "procedure": list(blocks.procedure),
        "verify": list(blocks.verify),
    }
    for feature in features:
        if feature not in FEATURES:
            raise WorkflowError(
                f"Feature error — Unknown feature '{feature}'. Known features: {', '.join(FEATURES)}"
            )
        for section, items in FEATURES[feature].items():
            lists[section] += [PromptBlocks.model_validate({"goal": item}).goal for item in items]
    return blocks.model_copy(update={k: tuple(v) for k, v in lists.items()})


def _text(value: PromptValue, step_id: str) -> str:
    if isinstance(value, str):
        return value
    parts = []
    for part in value:
        if isinstance(part, TextPart):
            parts.append(part.text)
        elif isinstance(part, RefPart):
            if part.refId not in REFS:
                raise WorkflowError(
                    f"Step '{step_id}': ref resolution error — Unknown ref '{part.refId}'. "
                    f"Known refs: {', '.join(REFS)}"
                )
            parts.append(REFS[part.refId])
    return "".join(parts)


def render_blocks(blocks: PromptBlocks, step_id: str) -> str:
    """Goal, Constraints, Procedure, Output Required, Verify (prompt-blocks.ts), joined by a blank line.

    Decision: an authored "1. " in front of a procedure item is dropped before the items are
    numbered (WorkRail prints "1. 1. Look ...", a quirk of SEMANTICS §9)."""
    sections = []
    if blocks.goal is not None:
        sections.append(f"## Goal\n{_text(blocks.goal, step_id)}")
    if blocks.constraints:
        sections.append("## Constraints\n" + "\n".join(f"- {_text(c, step_id)}" for c in blocks.constraints))
    if blocks.procedure:
        items = [AUTHORED_NUMBER.sub("", _text(p, step_id), count=1) for p in blocks.procedure]
        sections.append("## Procedure\n" + "\n".join(f"{i}. {item}" for i, item in enumerate(items, 1)))
    if blocks.outputRequired:
        sections.append(
            "## Output Required\n" + "\n".join(f"- **{k}**: {v}" for k, v in blocks.outputRequired.items())
        )
    if blocks.verify:
        sections.append("## Verify\n" + "\n".join(f"- {_text(v, step_id)}" for v in blocks.verify))
    if not sections:
        raise WorkflowError(
            f"Step '{step_id}': promptBlocks error — promptBlocks must contain at least one "
            "non-empty section."
        )
    return "\n\n".join(sections)


# --- the compiler's own checks and loops (workflow-compiler.ts) -------------------------------


def _runnable_steps(steps: tuple[TopStep, ...]) -> list[RunStep]:
    found: list[RunStep] = []
    for step in steps:
        if isinstance(step, LoopStep):
            found += (
                [s for s in step.body if not isinstance(s, LoopStep)] if isinstance(step.body, tuple) else []
            )
        else:
            found.append(step)
    return found


def _check_ids(steps: tuple[TopStep, ...], workflow_id: str) -> None:
    top = {s.id for s in steps}
    for step in steps:
        for inline in step.body if isinstance(step, LoopStep) and isinstance(step.body, tuple) else ():
            if inline.id in top:
                raise WorkflowError(
                    f"Inline loop body step id '{inline.id}' collides with existing step id in "
                    f"workflow '{workflow_id}'"
                )


def _check_contracts_and_assessments(steps: tuple[TopStep, ...], workflow: Workflow) -> None:
    declared = {a.id for a in workflow.assessments or ()}
    for step in _runnable_steps(steps):
        if isinstance(step, ParallelStep):
            continue
        ref = step.outputContract.contractRef if step.outputContract else None
        if ref is not None and ref not in CONTRACTS:
            raise WorkflowError(
                f"Step '{step.id}' declares unknown outputContract.contractRef '{ref}'. Known "
                f"contracts: {LOOP_CONTROL}"
            )
        for assessment in step.assessmentRefs or ():
            if assessment not in declared:
                raise WorkflowError(
                    f"Step '{step.id}' declares unknown assessmentRef '{assessment}'. "
                    f"Declared assessments: {', '.join(sorted(declared))}"
                )


def _compile_loop(step: LoopStep, steps: tuple[TopStep, ...]) -> CompiledLoop:
    if isinstance(step.body, tuple):
        body: tuple[RunStep, ...] = tuple(s for s in step.body if not isinstance(s, LoopStep))
        inline = True
    else:
        referenced = next((s for s in steps if s.id == step.body), None)
        if referenced is None or isinstance(referenced, LoopStep):
            raise WorkflowError(f"Loop '{step.id}': Loop body references missing step '{step.body}'")
        body, inline = (referenced,), False
    return CompiledLoop(step=step, body=body, inline=inline, source=_condition_source(step, body))


def _condition_source(step: LoopStep, body: tuple[RunStep, ...]) -> ArtifactSource | ContextSource | None:
    """while/until: the explicit conditionSource, else artifacts when a body step has the
    loop_control contract (which then overrides `condition`), else the `condition`."""
    config = step.loop
    if config.type not in ("while", "until"):
        return None
    if config.conditionSource is not None:
        return config.conditionSource
    if any(is_exit_step(s) for s in body):
        return ArtifactSource(kind="artifact_contract", contractRef=LOOP_CONTROL, loopId=step.id)
    if config.condition:
        return ContextSource(kind="context_variable", condition=config.condition)
    raise WorkflowError(f"{config.type} loop '{step.id}' missing condition and conditionSource")
