"""Artifact contracts (SEMANTICS §4): the typed outputs a step's `outputContract` asks for.

One strict pydantic model per contract kind, as WorkRail's zod schemas define them (unknown
fields refused, no coercion), and the two ways WorkRail reads `artifacts`:
- `check_contract` gates a step: the FIRST artifact of the contract's kind must be valid;
- `loop_decision` drives an artifact loop: the LAST valid `wr.loop_control` decides.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from daemon.workflows.definition import OutputContract

LOOP_CONTROL = "wr.contracts.loop_control"
ISO_DATETIME = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$"  # zod .datetime(): UTC, `Z`
UUID = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"


def _text(min_length: int = 0, max_length: int | None = None, pattern: str | None = None) -> Any:
    return StringConstraints(min_length=min_length, max_length=max_length, pattern=pattern)


NonEmpty = Annotated[str, _text(1)]
Short = Annotated[str, _text(1, 200)]
Id64 = Annotated[str, _text(1, 64)]
SafeId64 = Annotated[str, _text(1, 64, r"^[a-z0-9_-]+$")]
Reason1024 = Annotated[str, _text(0, 1024)]
Rationale = Annotated[str, _text(1, 512)]
Rationale20 = Annotated[str, _text(20)]
Path300 = Annotated[str, _text(1, 300)]
Relevance = Annotated[str, _text(1, 150)]
Appetite = Annotated[str, _text(1, 100)]
IsoTime = Annotated[str, _text(pattern=ISO_DATETIME)]
Uuid = Annotated[str, _text(pattern=UUID)]


class Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class LoopControlMetadata(Strict):
    reason: Reason1024 | None = None
    issuesFound: int | None = Field(default=None, ge=0)
    iterationIndex: int | None = Field(default=None, ge=0)
    confidence: int | None = Field(default=None, ge=0, le=100)


class LoopControl(Strict):
    kind: Literal["wr.loop_control"]
    loopId: SafeId64 | None = None
    decision: Literal["continue", "stop"]
    metadata: LoopControlMetadata | None = None


class DimensionLevel(Strict):
    level: NonEmpty
    rationale: Rationale | None = None


class Assessment(Strict):
    kind: Literal["wr.assessment"]
    assessmentId: Id64 | None = None
    dimensions: dict[str, NonEmpty | DimensionLevel] = Field(min_length=1)
    summary: Reason1024 | None = None


class CoordinatorSignal(Strict):
    kind: Literal["wr.coordinator_signal"]
    signalKind: Literal["progress", "finding", "data_needed", "approval_needed", "blocked"]
    payload: dict[str, Any]
    sessionId: str | None = None


class Finding(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow", frozen=True)  # zod .passthrough()

    severity: Literal["critical", "major", "minor", "nit"]
    summary: NonEmpty
    findingCategory: (
        Literal["correctness", "security", "architecture", "ux", "performance", "testing", "style"] | None
    ) = None


class ReviewVerdict(Strict):
    kind: Literal["wr.review_verdict"]
    verdict: Literal["clean", "minor", "blocking"]
    confidence: Literal["high", "medium", "low"]
    findings: list[Finding]
    summary: NonEmpty


class GateVerdict(Strict):
    kind: Literal["wr.gate_verdict"]
    version: Literal[1]
    verdict: Literal["approved", "rejected", "uncertain"]
    confidence: Literal["high", "medium", "low"]
    rationale: Rationale20


class Direction(Strict):
    direction: Short
    reason: Path300


class Location(Strict):
    path: Path300
    relevance: Relevance


class DiscoveryHandoff(Strict):
    kind: Literal["wr.discovery_handoff"]
    version: Literal[1]
    selectedDirection: NonEmpty
    designDocPath: str
    confidenceBand: Literal["high", "medium", "low"]
    keyInvariants: list[Short] = Field(max_length=12)
    rejectedDirections: list[Direction] | None = Field(default=None, max_length=5)
    implementationConstraints: list[Short] | None = Field(default=None, max_length=8)
    keyCodebaseLocations: list[Location] | None = Field(default=None, max_length=10)
    selectionTier: (
        Literal["strong_recommendation", "provisional_recommendation", "insufficient_signal"] | None
    ) = None


class ShapingHandoff(Strict):
    kind: Literal["wr.shaping_handoff"]
    version: Literal[1]
    pitchPath: NonEmpty
    selectedShape: Short
    appetite: Appetite
    keyConstraints: list[Short] = Field(max_length=8)
    rabbitHoles: list[Short] = Field(max_length=6)
    outOfScope: list[Short] = Field(max_length=6)
    validationChecklist: list[Short] = Field(max_length=10)


class Correction(Strict):
    assumed: Short
    actual: Short


class CodingHandoff(Strict):
    kind: Literal["wr.coding_handoff"]
    version: Literal[1]
    branchName: NonEmpty | None = None
    keyDecisions: list[Short] = Field(max_length=8)
    knownLimitations: list[Short] = Field(max_length=6)
    testsAdded: list[Short] = Field(max_length=10)
    filesChanged: list[Path300] = Field(max_length=20)
    correctedAssumptions: list[Correction] | None = Field(default=None, max_length=6)


class Freshness(Strict):
    oldestCapturedAt: IsoTime
    newestCapturedAt: IsoTime


class TeamConstraints(Strict):
    teamSize: int = Field(gt=0)
    technicalCapabilities: list[str] = Field(min_length=1)
    exclusions: list[str] = Field(default_factory=list)


class Defensibility(Strict):
    power: Literal[
        "Counter-Positioning", "Switching Costs", "Network Economies", "Scale Economies",
        "Cornered Resource", "Process Power", "Branding", "None_Imitable",
    ]  # fmt: skip
    cannibalization: str


class ShapingSeed(Strict):
    rawIdea: NonEmpty
    problem: NonEmpty
    baseline: NonEmpty
    appetiteHint: Literal["small_batch", "big_batch"]
    noGosHints: list[str]
    constraints: TeamConstraints
    evidenceTopK: list[Uuid] = Field(max_length=10)
    defensibilityClaim: Defensibility


class DifferentiationHandoff(Strict):
    kind: Literal["wr.differentiation_handoff"]
    version: Literal[1]
    schemaVersion: Literal["1.0.0"]
    generatedAt: IsoTime
    evidenceFreshness: Freshness
    validationChecklist: list[Short] = Field(max_length=10)
    shapingHandoff: ShapingSeed


CONTRACTS: dict[str, type[Strict]] = {
    "wr.contracts.assessment": Assessment,
    LOOP_CONTROL: LoopControl,
    "wr.contracts.coordinator_signal": CoordinatorSignal,
    "wr.contracts.review_verdict": ReviewVerdict,
    "wr.contracts.discovery_handoff": DiscoveryHandoff,
    "wr.contracts.shaping_handoff": ShapingHandoff,
    "wr.contracts.coding_handoff": CodingHandoff,
    "wr.contracts.gate_verdict": GateVerdict,
    "wr.contracts.differentiation_handoff": DifferentiationHandoff,
}


def artifact_kind(contract_ref: str) -> str:
    """`wr.contracts.loop_control` -> `wr.loop_control`."""
    return "wr." + contract_ref.removeprefix("wr.contracts.")


def kind_of(artifact: Any) -> Any:
    return artifact.get("kind") if isinstance(artifact, dict) else None


@dataclass(frozen=True)
class ContractCheck:
    """`ok`, or why not: `missing` (no artifact of the kind) or `invalid` (with the issues)."""

    status: Literal["ok", "missing", "invalid"]
    message: str = ""
    issues: tuple[str, ...] = field(default_factory=tuple)


def check_contract(artifacts: list[Any], contract: OutputContract) -> ContractCheck:
    """WorkRail's `validateArtifactContract`: the first artifact of the kind must be valid."""
    ref = contract.contractRef
    model = CONTRACTS.get(ref)
    if model is None:
        return ContractCheck("missing", f"Unknown artifact contract reference: {ref}")
    kind = artifact_kind(ref)
    matching = [a for a in artifacts if kind_of(a) == kind]
    if not matching:
        if not contract.required:
            return ContractCheck("ok")
        submitted = [k for k in map(kind_of, artifacts) if isinstance(k, str)]
        if submitted:
            listed = ", ".join(f"'{k}'" for k in submitted)
            message = (
                f"You submitted kind {listed}, but this step requires kind '{kind}' (contractRef={ref})."
            )
        else:
            message = (
                f"Required artifact missing: {ref}. Your artifacts were empty -- pass an "
                f"artifact with kind='{kind}'."
            )
        return ContractCheck("missing", message)
    try:
        model.model_validate(matching[0])
    except ValidationError as exc:
        issues = tuple(describe(exc))
        return ContractCheck("invalid", f"Artifact schema validation failed for {ref}", issues)
    return ContractCheck("ok")


def describe(exc: ValidationError) -> list[str]:
    return [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors(include_url=False)]


def loop_decision(artifacts: list[Any]) -> Literal["continue", "stop"] | None:
    """The last schema-valid `wr.loop_control` decision of this call's artifacts (`loopId` ignored)."""
    for artifact in reversed(artifacts):
        if kind_of(artifact) != "wr.loop_control":
            continue
        try:
            return LoopControl.model_validate(artifact).decision
        except ValidationError:
            continue
    return None


def parse_assessment(artifact: Any) -> Assessment | None:
    try:
        return Assessment.model_validate(artifact)
    except ValidationError:
        return None
