"""Valid outputs for any step: an autopilot that completes workflows through the engine.

`output_for(workflow, state, iteration)` builds what a diligent agent would send: the
artifact each contract asks for, an assessment per ref at a level that triggers no
follow-up, notes that meet the validationCriteria, and the loop inputs (`items` lists and
`count` numbers) every for/forEach loop of the workflow reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from daemon.workflows import CompiledWorkflow
from daemon.workflows.artifacts import artifact_kind
from daemon.workflows.definition import WorkflowStep
from daemon.workflows.engine import EngineState, StepOutput

ROOT = Path(__file__).resolve().parents[2]
# WorkRail's 48 workflow files and example sequences, copied in (tests/fixtures/workrail/README.md)
WORKRAIL = ROOT / "tests" / "fixtures" / "workrail"


def workrail_folder() -> Path:
    """WorkRail's 48 files, from the repository's own copy."""
    folder = WORKRAIL / "workflows"
    assert folder.is_dir(), f"WorkRail's workflows are missing from {folder}"
    return folder


DIFFERENTIATION = {
    "kind": "wr.differentiation_handoff",
    "version": 1,
    "schemaVersion": "1.0.0",
    "generatedAt": "2025-01-02T03:04:05Z",
    "evidenceFreshness": {
        "oldestCapturedAt": "2025-01-01T00:00:00Z",
        "newestCapturedAt": "2025-01-02T00:00:00Z",
    },
    "validationChecklist": ["talk to users"],
    "shapingHandoff": {
        "rawIdea": "idea",
        "problem": "friction",
        "baseline": "spreadsheets",
        "appetiteHint": "small_batch",
        "noGosHints": [],
        "constraints": {"teamSize": 2, "technicalCapabilities": ["python"]},
        "evidenceTopK": ["123e4567-e89b-12d3-a456-426614174000"],
        "defensibilityClaim": {"power": "Branding", "cannibalization": "none"},
    },
}

ARTIFACTS: dict[str, dict[str, Any]] = {
    "wr.review_verdict": {
        "verdict": "clean",
        "confidence": "high",
        "findings": [],
        "summary": "No findings.",
    },
    "wr.gate_verdict": {
        "version": 1,
        "verdict": "approved",
        "confidence": "high",
        "rationale": "Meets every stated criterion.",
    },
    "wr.discovery_handoff": {
        "version": 1,
        "selectedDirection": "d",
        "designDocPath": "design.md",
        "confidenceBand": "high",
        "keyInvariants": [],
    },
    "wr.shaping_handoff": {
        "version": 1,
        "pitchPath": "pitch.md",
        "selectedShape": "s",
        "appetite": "small",
        "keyConstraints": [],
        "rabbitHoles": [],
        "outOfScope": [],
        "validationChecklist": [],
    },
    "wr.coding_handoff": {
        "version": 1,
        "keyDecisions": [],
        "knownLimitations": [],
        "testsAdded": [],
        "filesChanged": [],
    },
    "wr.coordinator_signal": {"signalKind": "progress", "payload": {}},
    "wr.assessment": {"dimensions": {"any": "level"}},
    "wr.differentiation_handoff": DIFFERENTIATION,
}


def artifact(contract_ref: str, loop_iteration: int | None) -> dict[str, Any]:
    kind = artifact_kind(contract_ref)
    if kind == "wr.loop_control":  # two passes where the loop allows, then stop
        return {"kind": kind, "decision": "stop" if (loop_iteration or 0) >= 1 else "continue"}
    return {"kind": kind, **ARTIFACTS[kind]}


def loop_inputs(workflow: CompiledWorkflow) -> dict[str, Any]:
    context: dict[str, Any] = {}
    for loop in workflow.loops.values():
        config = loop.step.loop
        if config.type == "forEach" and config.items:
            context[config.items] = [{"name": "item one", "title": "t"}, {"name": "item two", "title": "t"}]
        if config.type == "for" and isinstance(config.count, str):
            context[config.count] = 2
    return context


def notes_for(step: WorkflowStep) -> str:
    notes = "Worked through this step and recorded what the next steps rely on. "
    rules = step.validationCriteria if isinstance(step.validationCriteria, list) else []
    for rule in rules:
        if rule.get("type") == "contains":
            notes += f"{rule['value']}. "
    low = max([r.get("min", 0) for r in rules if r.get("type") == "length"] or [0])
    return notes + "x" * max(low - len(notes), 0)


def output_for(workflow: CompiledWorkflow, state: EngineState) -> StepOutput:
    assert state.pending is not None
    step = workflow.runnable[state.pending.stepId]
    iteration = state.pending.loopPath[-1][1] if state.pending.loopPath else None
    if not isinstance(step, WorkflowStep):
        return StepOutput(notes_for(WorkflowStep(id="p")), loop_inputs(workflow))
    artifacts = [artifact(step.outputContract.contractRef, iteration)] if step.outputContract else []
    triggers = {c.when.anyEqualsLevel for c in step.assessmentConsequences or ()}
    for definition in workflow.workflow.assessments or ():
        if definition.id in (step.assessmentRefs or ()):
            levels = {d.id: next(lv for lv in d.levels if lv not in triggers) for d in definition.dimensions}
            artifacts.append({"kind": "wr.assessment", "assessmentId": definition.id, "dimensions": levels})
    return StepOutput(notes_for(step), loop_inputs(workflow), artifacts)
