"""Small workflows for the engine tests, and a driver that completes steps one call at a time."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from daemon.workflows import CompiledWorkflow, Workflow, compile_workflow
from daemon.workflows.compiler import template_id
from daemon.workflows.engine import Advanced, Blocked, EngineState, StepOutput, advance, present, start

NOTES = "Did the work this step asks for and wrote down what the next steps need to know."


def step(step_id: str, **fields: Any) -> dict[str, Any]:
    return {
        "id": step_id,
        "title": fields.pop("title", f"Title {step_id}"),
        "prompt": f"Do {step_id}.",
        **fields,
    }


def loop(loop_id: str, body: Any, **config: Any) -> dict[str, Any]:
    extra = {k: config.pop(k) for k in ("runCondition",) if k in config}
    config.setdefault("maxIterations", 5)
    return {"id": loop_id, "type": "loop", "title": f"Loop {loop_id}", "loop": config, "body": body, **extra}


def exit_step(step_id: str) -> dict[str, Any]:
    return step(step_id, outputContract={"contractRef": "wr.contracts.loop_control"})


def build(
    steps: Sequence[Mapping[str, Any]], routines: Sequence[Workflow] = (), **fields: Any
) -> CompiledWorkflow:
    workflow = Workflow.model_validate({"id": "t", "name": "Test", "steps": list(steps), **fields})
    return compile_workflow(workflow, {template_id(r.id): r for r in routines})


def stop() -> list[dict[str, Any]]:
    return [{"kind": "wr.loop_control", "decision": "stop"}]


def go() -> list[dict[str, Any]]:
    return [{"kind": "wr.loop_control", "decision": "continue"}]


class Walk:
    """Drives one workflow: `call(context, artifacts)` completes the pending step."""

    def __init__(self, workflow: CompiledWorkflow, context: Mapping[str, Any] | None = None) -> None:
        self.workflow = workflow
        self.state: EngineState = start(workflow, dict(context or {}))
        self.seen: list[str] = [self.current]

    @property
    def current(self) -> str:
        shown = present(self.workflow, self.state)
        return shown.step_id if shown else "<complete>"

    def call(
        self, context: Mapping[str, Any] | None = None, artifacts: list[Any] | None = None, notes: str = NOTES
    ) -> Advanced | Blocked:
        result = advance(self.workflow, self.state, StepOutput(notes, context, list(artifacts or [])))
        if isinstance(result, Advanced):
            self.state = result.state
            self.seen.append(self.current)
        return result

    def run(self, calls: Sequence[Mapping[str, Any]]) -> list[str]:
        for entry in calls:
            result = self.call(entry.get("context"), entry.get("artifacts"))
            assert isinstance(result, Advanced), result
        return self.seen
