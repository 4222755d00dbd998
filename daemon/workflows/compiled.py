"""A workflow as it runs: what `compiler.compile_workflow` makes of an authored one.

Every step has a plain `prompt` (promptBlocks, features and refs rendered), templateCalls
are expanded into the routine's steps, and each loop knows its body steps. Immutable and
shared by every session of the workflow; the engine (`engine.py`) reads it, never changes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from daemon.workflows.definition import (
    ArtifactSource,
    ContextSource,
    LoopStep,
    ParallelStep,
    RunStep,
    TopStep,
    Workflow,
    WorkflowLimits,
)


@dataclass(frozen=True)
class CompiledLoop:
    step: LoopStep
    body: tuple[RunStep, ...]
    inline: bool  # `body: [...]` (else `body: "step-id"`, a top-level step)
    source: ArtifactSource | ContextSource | None  # while/until only

    @property
    def id(self) -> str:
        return self.step.id

    @property
    def max_iterations(self) -> int:
        return int(self.step.loop.maxIterations)


@dataclass(frozen=True)
class CompiledWorkflow:
    workflow: Workflow  # as authored: name, limits, assessments, metricsProfile, ...
    steps: tuple[TopStep, ...]  # top level, after templateCall expansion, in declaration order
    loops: dict[str, CompiledLoop]

    @property
    def id(self) -> str:
        return self.workflow.id

    @property
    def name(self) -> str:
        return self.workflow.name

    @property
    def limits(self) -> WorkflowLimits:
        return self.workflow.limits

    @cached_property
    def body_ids(self) -> frozenset[str]:
        return frozenset(step.id for loop in self.loops.values() for step in loop.body)

    @cached_property
    def parent_loop(self) -> dict[str, CompiledLoop]:
        """Body step id -> its loop."""
        return {step.id: loop for loop in self.loops.values() for step in loop.body}

    @cached_property
    def runnable(self) -> dict[str, RunStep]:
        """Every step that can be presented, by id (top-level ones and loop bodies)."""
        found: dict[str, RunStep] = {}
        for step in self.steps:
            if isinstance(step, LoopStep):
                found.update((b.id, b) for b in self.loops[step.id].body)
            else:
                found[step.id] = step
        return found

    @cached_property
    def order(self) -> tuple[str, ...]:
        """Runnable step ids in declaration order, inline bodies in their loop's place: the
        session record's stepIndex is a position in this list, stepCount its length."""
        ids: list[str] = []
        for step in self.steps:
            if isinstance(step, LoopStep):
                loop = self.loops[step.id]
                ids.extend(b.id for b in loop.body if loop.inline)
            else:
                ids.append(step.id)
        return tuple(ids)

    @property
    def step_count(self) -> int:
        return len(self.order)

    def index_of(self, step_id: str | None) -> int:
        return self.order.index(step_id) if step_id in self.order else self.step_count

    @cached_property
    def last_step_ids(self) -> frozenset[str]:
        """Where WorkRail's metrics footer says "final step": the last top-level step, or the
        last body step (not a loop-control exit step) of a loop that is the last step."""
        last = self.steps[-1]
        if not isinstance(last, LoopStep):
            return frozenset({last.id})
        loop = self.loops[last.id]
        work = [b for b in loop.body if not is_exit_step(b)] if loop.inline else []
        return frozenset({last.id, *([work[-1].id] if work else [])})

    def summary(self) -> dict[str, Any]:
        """The catalog entry of GET /api/v2/workflows."""
        steps: list[dict[str, Any]] = []
        for step_id in self.order:
            step = self.runnable[step_id]
            entry: dict[str, Any] = {"id": step.id, "title": step.title}
            if loop := self.parent_loop.get(step.id):
                entry["loopId"] = loop.id
            steps.append(entry)
        return {
            "id": self.id,
            "name": self.name,
            "description": self.workflow.description,
            "version": self.workflow.version,
            "stepCount": self.step_count,
            "steps": steps,
            "loops": [
                {"id": loop.id, "type": loop.step.loop.type, "maxIterations": loop.max_iterations}
                for loop in self.loops.values()
            ],
        }


def is_exit_step(step: RunStep) -> bool:
    """A loop's decision step (its outputContract is wr.contracts.loop_control)."""
    return (
        not isinstance(step, ParallelStep)
        and step.outputContract is not None
        and step.outputContract.contractRef == "wr.contracts.loop_control"
    )
