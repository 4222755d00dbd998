"""Workflows (SPEC §4.4): JSON files of steps, bundled in `workflows/` and from a user folder.

The schema is a subset of WorkRail's, so its simple workflows load (unknown fields are
ignored). A bad file is reported by name with the reason and skipped, never fatal.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

log = logging.getLogger(__name__)


class WorkflowStep(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    id: str = Field(min_length=1)
    title: str = Field(min_length=1)
    prompt: str = Field(min_length=1)


class WorkflowLimits(BaseModel):
    """Per-workflow overrides of the agent's limits (SPEC §4.1 defaults)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    maxTurns: int = Field(default=200, ge=1)
    maxWallClockSeconds: float = Field(default=3600.0, gt=0)
    stallSeconds: float = Field(default=120.0, gt=0)


class Workflow(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    id: str = Field(min_length=1, pattern=r"^[A-Za-z0-9._-]+$")
    name: str
    description: str = ""
    version: str = "1.0.0"
    steps: tuple[WorkflowStep, ...] = Field(min_length=1)
    limits: WorkflowLimits = WorkflowLimits()

    def summary(self) -> dict[str, object]:
        return {
            "id": self.id,
            "name": self.name,
            "description": self.description,
            "version": self.version,
            "stepCount": len(self.steps),
            "steps": [{"id": s.id, "title": s.title} for s in self.steps],
        }


@dataclass(frozen=True)
class Catalog:
    workflows: dict[str, Workflow]
    problems: dict[str, str] = field(default_factory=dict)  # file name -> why it was skipped

    def get(self, workflow_id: str) -> Workflow | None:
        return self.workflows.get(workflow_id)


def bundled_dir() -> Path:
    return Path(str(files("workflows")))


def load_catalog(extra_dir: Path | None = None) -> Catalog:
    """Bundled workflows, then those of `extra_dir` (a same id there replaces the bundled one)."""
    workflows: dict[str, Workflow] = {}
    problems: dict[str, str] = {}
    folders = [bundled_dir()] + ([extra_dir] if extra_dir is not None else [])
    for folder in folders:
        if not folder.is_dir():
            problems[str(folder)] = "not a directory"
            log.warning("workflows folder %s is not a directory; skipped", folder)
            continue
        for path in sorted(folder.glob("*.json")):
            try:
                workflow = Workflow.model_validate_json(path.read_bytes())
            except (OSError, ValidationError) as exc:
                reason = str(exc).splitlines()[0] if isinstance(exc, OSError) else _first_error(exc)
                problems[path.name] = reason
                log.warning("workflow file %s skipped: %s", path, reason)
                continue
            workflows[workflow.id] = workflow
    return Catalog(workflows, problems)


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(p) for p in error["loc"]) or "file"
    return f"{where}: {error['msg']} ({exc.error_count()} error(s))"
