"""The workflow engine (SEMANTICS §1, §4, docs/redis.md): which step comes next. Pure, no I/O.

`start(workflow, context)` gives the first state (WorkRail always starts at the authored
`steps[0]`, its runCondition unchecked). `advance(workflow, state, output)` is one
`continue_workflow` call: the context is merged (shallow, `null` deletes), the output is
checked against the pending step (`gating.py`), and WorkRail's interpreter picks the next
step: top-level steps rescanned from the top in declaration order (a skipped step can run
later), loops re-checked before every body step, a forward-only scan of the body, loop
conditions read from this call's context and artifacts, `maxIterations` a natural stop.
A blocked call, or one that leaves a loop without its `count`/`items`, changes nothing.

The state is plain data (`EngineState`, JSON in the session record): a resumed session
carries on in the same loop iteration with the same context.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict

from daemon.workflows import conditions
from daemon.workflows.artifacts import loop_decision
from daemon.workflows.compiled import CompiledLoop, CompiledWorkflow
from daemon.workflows.definition import ArtifactSource, LoopStep, RunStep
from daemon.workflows.gating import Reason, blocking_reasons
from daemon.workflows.js import is_number, js_string, js_typeof
from daemon.workflows.render import LoopPath, Presented, loop_variables, render

RESERVED_KEYS = ("__proto__", "constructor", "prototype")
SELECTION_GUARD = 10_000


class Frame(BaseModel):
    model_config = ConfigDict(frozen=True)

    loopId: str
    iteration: int = 0  # 0-based
    bodyIndex: int = 0


class Pending(BaseModel):
    model_config = ConfigDict(frozen=True)

    stepId: str
    loopPath: LoopPath = ()

    @property
    def key(self) -> str:
        """WorkRail's step instance key: `stepId`, or `loopId@iteration::stepId` in a loop."""
        path = "/".join(f"{loop}@{iteration}" for loop, iteration in self.loopPath)
        return f"{path}::{self.stepId}" if path else self.stepId


class EngineState(BaseModel):
    model_config = ConfigDict(frozen=True)

    context: dict[str, Any] = {}
    completed: tuple[str, ...] = ()  # step instance keys, and ids of loops that were left
    loopStack: tuple[Frame, ...] = ()
    pending: Pending | None = None  # None: the workflow is complete

    @property
    def complete(self) -> bool:
        return self.pending is None


@dataclass(frozen=True)
class StepOutput:
    """What one continue_workflow call brings."""

    notes: str = ""
    context: Mapping[str, Any] | None = None
    artifacts: list[Any] = field(default_factory=list)


@dataclass(frozen=True)
class Advanced:
    state: EngineState
    completed_step: str  # the id of the step this call completed
    confirm: bool = False  # that step's requireConfirmation held (docs/workflows.md `gates`)
    gate_kind: str | None = None


@dataclass(frozen=True)
class Blocked:
    reasons: list[Reason]


class MissingContext(Exception):
    """A for/forEach loop's `count`/`items` is not in the context as a number/array."""


def start(workflow: CompiledWorkflow, context: Mapping[str, Any]) -> EngineState:
    first = workflow.steps[0]
    state = EngineState(context=dict(context))
    if not isinstance(first, LoopStep):
        return state.model_copy(update={"pending": Pending(stepId=first.id)})
    # WorkRail would present the loop step itself; WorkTrain enters the loop.
    selection = _Selection(workflow, [Frame(loopId=first.id)], [], state.context, [])
    return _settle(state, selection)


def initial_context(goal: str, workspace: str, context: Mapping[str, Any] | None) -> dict[str, Any]:
    """A session's context at its start: the goal and workspace (as WorkRail's daemon sets
    them), then the dispatch's `context`, whose keys win."""
    return {"goal": goal, "workspacePath": workspace, **(context or {})}


def first_step(
    workflow: CompiledWorkflow, goal: str, workspace: str, context: Mapping[str, Any] | None
) -> Presented | None:
    """The step a new session starts with, as the worker will render it (None if it cannot
    be known before the run: a first loop whose items are not in the context yet)."""
    try:
        return present(workflow, start(workflow, initial_context(goal, workspace, context)))
    except MissingContext:
        return None


def present(workflow: CompiledWorkflow, state: EngineState) -> Presented | None:
    """The pending step, rendered; None once the workflow is complete."""
    if state.pending is None:
        return None
    return render(workflow, state.pending.stepId, state.pending.loopPath, state.context)


def advance(workflow: CompiledWorkflow, state: EngineState, output: StepOutput) -> Advanced | Blocked:
    pending = state.pending
    if pending is None:
        return Blocked([Reason("WORKFLOW_COMPLETE", "The workflow is already complete.")])
    step = workflow.runnable[pending.stepId]
    try:
        merged = merge_context(state.context, output.context)
    except ValueError as exc:
        return Blocked([Reason("INVALID_CONTEXT", str(exc))])
    assessments = workflow.workflow.assessments or ()
    reasons = blocking_reasons(step, assessments, output.notes, output.artifacts, merged)
    if reasons:
        return Blocked(reasons)
    completed = [*state.completed, pending.key]
    selection = _Selection(workflow, list(state.loopStack), completed, merged, output.artifacts)
    try:
        new_state = _settle(state.model_copy(update={"context": merged}), selection)
    except MissingContext as exc:
        fix = "Call continue_workflow again with that variable in `context`; nothing of this call was kept."
        return Blocked([Reason("MISSING_CONTEXT", str(exc), (), (fix,))])
    confirm, kind = confirmation(step, merged)
    return Advanced(new_state, step.id, confirm, kind)


def merge_context(stored: Mapping[str, Any], delta: Mapping[str, Any] | None) -> dict[str, Any]:
    """Shallow: a key from the call replaces the stored one, `null` deletes it (context-merge.ts)."""
    if not delta:
        return dict(stored)
    for key in RESERVED_KEYS:
        if key in delta:
            raise ValueError(f"Context key '{key}' is reserved and cannot be used.")
    merged = {k: v for k, v in stored.items() if delta.get(k, ...) is not None}
    merged.update((k, v) for k, v in delta.items() if v is not None)
    return merged


def confirmation(step: RunStep, context: Mapping[str, Any]) -> tuple[bool, str | None]:
    """Whether the step's `requireConfirmation` holds, and its gate kind (input-validation.ts)."""
    rule = step.requireConfirmation
    if rule is None or rule is False:
        return False, None
    if rule is True:
        return True, "coordinator_eval"
    if rule.get("kind") in ("coordinator_eval", "human_approval"):
        held = conditions.evaluate(rule.get("condition"), context) if "condition" in rule else True
        return held, str(rule["kind"]) if held else None
    held = conditions.evaluate(rule, context)
    return held, "coordinator_eval" if held else None


# --- the interpreter (workflow-interpreter.ts `next`, loop-runtime.ts) ------------------------


@dataclass
class _Selection:
    """One run of WorkRail's `next()`: mutable here, and nowhere else."""

    workflow: CompiledWorkflow
    stack: list[Frame]
    completed: list[str]
    context: dict[str, Any]
    artifacts: list[Any]
    pending: Pending | None = None


def _settle(state: EngineState, s: _Selection) -> EngineState:
    for _ in range(SELECTION_GUARD):
        if s.stack and _next_in_loop(s):
            break
        if s.stack:
            continue
        if _next_top_level(s) or not s.stack:
            break
    else:
        raise RuntimeError("workflow selection exceeded its guard (an engine bug)")
    return state.model_copy(
        update={"completed": tuple(s.completed), "loopStack": tuple(s.stack), "pending": s.pending}
    )


def _next_top_level(s: _Selection) -> bool:
    done = set(s.completed)
    for step in s.workflow.steps:
        if step.id in s.workflow.body_ids or step.id in done:
            continue
        if step.runCondition and not conditions.evaluate(step.runCondition, s.context):
            continue  # not completed: re-checked at every later selection ("backfill")
        if isinstance(step, LoopStep):
            s.stack.append(Frame(loopId=step.id))
            return False
        s.pending = Pending(stepId=step.id)
        return True
    return False


def _next_in_loop(s: _Selection) -> bool:
    frame = s.stack[-1]
    loop = s.workflow.loops[frame.loopId]
    if not _should_enter(loop, frame.iteration, s):  # re-checked before every body step
        return _exit(s, loop)
    path = tuple((f.loopId, f.iteration) for f in s.stack)
    done = set(s.completed)
    scope = {**s.context, **loop_variables(loop, frame.iteration, s.context)}
    for index in range(frame.bodyIndex, len(loop.body)):  # forward only
        step = loop.body[index]
        if Pending(stepId=step.id, loopPath=path).key in done:
            continue
        if step.runCondition and not conditions.evaluate(step.runCondition, scope):
            continue
        s.stack[-1] = frame.model_copy(update={"bodyIndex": index})
        s.pending = Pending(stepId=step.id, loopPath=path)
        return True
    following = frame.iteration + 1
    if following >= loop.max_iterations or not _should_enter(loop, following, s):
        return _exit(s, loop)  # maxIterations is a natural stop, not an error
    s.stack[-1] = Frame(loopId=loop.id, iteration=following)
    return False


def _exit(s: _Selection, loop: CompiledLoop) -> bool:
    s.stack.pop()
    s.completed.append(loop.id)
    return False


def _should_enter(loop: CompiledLoop, iteration: int, s: _Selection) -> bool:
    config = loop.step.loop
    if config.type == "for":
        count = config.count
        if isinstance(count, str):
            count = s.context.get(count)
            if not is_number(count):
                raise MissingContext(f"for loop '{loop.id}' requires numeric context['{config.count}']")
        return iteration < count  # type: ignore[operator]
    if config.type == "forEach":
        items = s.context.get(config.items or "")
        if not isinstance(items, list):
            raise MissingContext(f"forEach loop '{loop.id}' requires array context['{config.items}']")
        if iteration == 0 and items:
            _check_item_shape(loop, items)
        return iteration < len(items)
    if isinstance(loop.source, ArtifactSource):  # the same for while and until: no inversion
        return loop_decision(s.artifacts) != "stop"
    assert loop.source is not None, "the compiler gives every while/until loop a condition source"
    scope = {**s.context, **loop_variables(loop, iteration, s.context)}
    held = conditions.evaluate(loop.source.condition, scope)
    return held if config.type == "while" else not held


def _check_item_shape(loop: CompiledLoop, items: list[Any]) -> None:
    """A body that uses `{{item.field}}` over items that are not objects fails at entry."""
    item_var = loop.step.loop.itemVar or "currentItem"
    uses_fields = any(f"{{{{{item_var}." in (getattr(step, "prompt", None) or "") for step in loop.body)
    if uses_fields and not isinstance(items[0], dict):
        first, items_var = items[0], loop.step.loop.items
        raise MissingContext(
            f"forEach loop '{loop.id}': body uses {{{{{item_var}.field}}}} but '{items_var}' contains "
            f"{js_typeof(first)}s (e.g. \"{js_string(first)[:60]}\"). Each item in '{items_var}' "
            "must be an object."
        )
