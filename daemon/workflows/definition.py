"""The workflow format as authored (WorkRail's, docs/workflows.md), as pydantic models.

These models check types only; WorkRail's structural rules (a loop needs a body, a step a
prompt source, ...) are in `validation.py` and its compiler's rules in `compiler.py`, so
that a skipped file is reported with the reason WorkRail itself would give. Unknown fields
are ignored (docs/workflows.md): `about`, `examples`, `preconditions`, ... have no effect on a run.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, StrictFloat, StrictInt, StrictStr, Tag

from daemon.workflows.agentconfig import AgentConfig

Condition = dict[str, Any]  # WorkRail's condition language (conditions.py); checked when evaluated
Number = StrictInt | StrictFloat


class Part(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class TextPart(Part):
    kind: Literal["text"]
    text: str


class RefPart(Part):
    kind: Literal["ref"]
    refId: str = Field(min_length=1)


PromptPart = Annotated[TextPart | RefPart, Field(discriminator="kind")]
PromptValue = str | tuple[PromptPart, ...]


class PromptBlocks(Part):
    """Structured prompt sections, rendered to a `prompt` when the workflow is loaded."""

    goal: PromptValue | None = None
    constraints: tuple[PromptValue, ...] = ()
    procedure: tuple[PromptValue, ...] = ()
    outputRequired: dict[str, str] = Field(default_factory=dict)
    verify: tuple[PromptValue, ...] = ()


class PromptFragment(Part):
    id: str = ""
    when: Condition | None = None
    text: str = ""


class TemplateCall(Part):
    templateId: str = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=dict)


class OutputContract(Part):
    contractRef: str = Field(min_length=1)
    required: bool = True


class AssessmentDimension(Part):
    id: str = ""
    purpose: str = ""
    levels: tuple[str, ...] = ()
    required: bool = True


class AssessmentDefinition(Part):
    id: str = ""
    purpose: str = ""
    dimensions: tuple[AssessmentDimension, ...] = ()


class ConsequenceTrigger(Part):
    anyEqualsLevel: str
    forAssessment: str | None = None


class ConsequenceEffect(Part):
    kind: str
    guidance: str = ""


class AssessmentConsequence(Part):
    when: ConsequenceTrigger
    effect: ConsequenceEffect


class StepBase(Part):
    id: str = Field(min_length=1)
    title: str = ""
    runCondition: Condition | None = None
    requireConfirmation: bool | Condition | None = None
    notesOptional: bool = False


class WorkflowStep(StepBase):
    """A standard step: `prompt`, `promptBlocks` or a `templateCall` of a routine."""

    prompt: str | None = None
    promptBlocks: PromptBlocks | None = None
    templateCall: TemplateCall | None = None
    agentRole: str | None = None
    guidance: tuple[str, ...] = ()
    promptFragments: tuple[PromptFragment, ...] = ()
    outputContract: OutputContract | None = None
    assessmentRefs: tuple[str, ...] | None = None
    assessmentConsequences: tuple[AssessmentConsequence, ...] | None = None
    validationCriteria: list[Any] | dict[str, Any] | None = None
    # WorkRail's virtual steps (never used by its bundled files): refused by the compiler.
    verification: Any = None
    audit: Any = None


class ParallelDelegation(Part):
    workflowId: str
    goal: str | None = None
    runCondition: Condition | None = None
    contextMapping: dict[str, str] = Field(default_factory=dict)
    args: dict[str, Any] = Field(default_factory=dict)
    allowedTools: tuple[str, ...] = ()


class ParallelStep(StepBase):
    type: Literal["parallel"]
    parallelDelegations: tuple[ParallelDelegation, ...] = Field(min_length=1)
    synthesis: Any = None  # WorkRail's virtual `__synthesis` step: refused by the compiler


class ArtifactSource(Part):
    kind: Literal["artifact_contract"]
    contractRef: str = Field(min_length=1)
    loopId: str | None = None


class ContextSource(Part):
    kind: Literal["context_variable"]
    condition: Condition


ConditionSource = Annotated[ArtifactSource | ContextSource, Field(discriminator="kind")]


class LoopConfig(Part):
    type: Literal["while", "until", "for", "forEach"]
    condition: Condition | None = None
    conditionSource: ConditionSource | None = None
    items: StrictStr | None = None
    count: Number | StrictStr | None = None
    maxIterations: Number
    iterationVar: str | None = None
    itemVar: str | None = None
    indexVar: str | None = None


class LoopStep(StepBase):
    type: Literal["loop"]
    loop: LoopConfig
    body: str | tuple[AnyStep, ...]
    prompt: str | None = None  # never shown (SEMANTICS §1): a loop step is not presented


def _step_kind(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return kind if kind in ("loop", "parallel") else "step"


AnyStep = Annotated[
    Annotated[WorkflowStep, Tag("step")]
    | Annotated[LoopStep, Tag("loop")]
    | Annotated[ParallelStep, Tag("parallel")],
    Discriminator(_step_kind),
]
LoopStep.model_rebuild()


class WorkflowLimits(BaseModel):
    """Per-workflow overrides of the agent's limits (docs/DEVELOPING.md defaults): WorkTrain's own field."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    maxTurns: int = Field(default=200, ge=1)
    maxWallClockSeconds: float = Field(default=3600.0, gt=0)
    stallSeconds: float = Field(default=120.0, gt=0)


class ExtensionPoint(Part):
    slotId: str = ""
    purpose: str = ""
    default: str = ""


class Workflow(BaseModel):
    """A workflow file as authored. `compiler.compile_workflow` turns it into what runs."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: str = Field(min_length=1, pattern=r"^[A-Za-z0-9._-]+$")
    name: str
    description: str = ""
    version: str = "1.0.0"
    steps: tuple[AnyStep, ...] = Field(min_length=1)
    limits: WorkflowLimits = WorkflowLimits()
    agentConfig: AgentConfig | None = None  # the sessions' model by default (docs/DEVELOPING.md)
    features: tuple[str, ...] = ()
    assessments: tuple[AssessmentDefinition, ...] | None = None
    metaGuidance: tuple[str, ...] = ()
    metricsProfile: str | None = None
    extensionPoints: tuple[ExtensionPoint, ...] = ()
    references: tuple[dict[str, Any], ...] | None = None


TopStep = WorkflowStep | LoopStep | ParallelStep
RunStep = WorkflowStep | ParallelStep  # what can be presented to the agent
