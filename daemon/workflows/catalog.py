"""The catalog (docs/workflows.md): the bundled workflows, then those of WORKTRAIN_WORKFLOWS_DIR.

Every `*.json` file of a folder (and its subfolders, as WorkRail lays them out) is read
and compiled (read through daemon/host/safefile.py: regular files only, never blocking,
capped); routines (`wr.routine-X`, `routine-X`, or any file under a `routines/`
folder) are what `templateCall` expands. A file that cannot run is reported by name with
the reason and skipped, never fatal; `Catalog.problems` lists them.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path

from pydantic import ValidationError

from daemon.host.safefile import read_regular
from daemon.workflows.compiled import CompiledWorkflow
from daemon.workflows.compiler import WorkflowError, compile_workflow, template_id
from daemon.workflows.definition import Workflow

log = logging.getLogger(__name__)

ROUTINE_PREFIXES = ("wr.routine-", "routine-")


@dataclass(frozen=True)
class Catalog:
    workflows: dict[str, Workflow]
    problems: dict[str, str] = field(default_factory=dict)  # file -> why it was skipped
    routine_ids: frozenset[str] = frozenset()  # routines that do not say so in their id
    _compiled: dict[str, CompiledWorkflow] = field(default_factory=dict, compare=False, repr=False)

    def get(self, workflow_id: str) -> Workflow | None:
        return self.workflows.get(workflow_id)

    def routines(self) -> dict[str, Workflow]:
        """Template id (`wr.templates.routine.X`) -> the routine workflow."""
        return {
            template_id(w.id): w
            for w in self.workflows.values()
            if w.id.startswith(ROUTINE_PREFIXES) or w.id in self.routine_ids
        }

    def compiled(self, workflow_id: str) -> CompiledWorkflow | None:
        """The workflow as it runs (compiled once); raises WorkflowError if it cannot run."""
        if (found := self._compiled.get(workflow_id)) is not None:
            return found
        workflow = self.workflows.get(workflow_id)
        if workflow is None:
            return None
        compiled = compile_workflow(workflow, self.routines())
        self._compiled[workflow_id] = compiled
        return compiled

    def summaries(self) -> list[dict[str, object]]:
        out = []
        for workflow_id in sorted(self.workflows):
            try:
                compiled = self.compiled(workflow_id)
            except WorkflowError as exc:
                log.warning("workflow %s cannot run: %s", workflow_id, exc)
                continue
            if compiled is not None:
                out.append(compiled.summary())
        return out

    def skipped(self) -> list[dict[str, str]]:
        return [{"file": name, "reason": reason} for name, reason in sorted(self.problems.items())]


def bundled_dir() -> Path:
    return Path(str(files("workflows")))


def load_catalog(extra_dir: Path | None = None) -> Catalog:
    """Bundled workflows, then those of `extra_dir` (a same id there replaces the bundled one)."""
    workflows: dict[str, Workflow] = {}
    origin: dict[str, str] = {}
    problems: dict[str, str] = {}
    routine_ids: set[str] = set()
    folders = [bundled_dir()] + ([extra_dir] if extra_dir is not None else [])
    for folder in folders:
        if not folder.is_dir():
            problems[str(folder)] = "not a directory"
            log.warning("workflows folder %s is not a directory; skipped", folder)
            continue
        seen_here: dict[str, str] = {}
        for name, path in _files(folder):
            try:
                workflow = _read(path)
            except (OSError, ValueError) as exc:
                _skip(problems, name, str(exc))
                continue
            if workflow.id in seen_here:
                _skip(
                    problems,
                    name,
                    f"workflow id {workflow.id!r} is already defined by {seen_here[workflow.id]}",
                )
                continue
            seen_here[workflow.id] = origin[workflow.id] = name
            workflows[workflow.id] = workflow
            if "routines" in Path(name).parts[:-1]:
                routine_ids.add(workflow.id)
    catalog = Catalog(workflows, problems, frozenset(routine_ids))
    for workflow_id in list(workflows):
        try:
            catalog.compiled(workflow_id)
        except (WorkflowError, RecursionError) as exc:
            del workflows[workflow_id]
            _skip(problems, origin[workflow_id], str(exc) or "nested too deeply to compile")
    return catalog


def _files(folder: Path) -> Iterator[tuple[str, Path]]:
    for path in sorted(folder.rglob("*.json")):
        relative = path.relative_to(folder)
        if not any(part.startswith(".") for part in relative.parts):
            yield relative.as_posix(), path


MAX_JSON_DEPTH = 64  # far beyond any real workflow; a deeper file would exhaust the stack
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)


def json_depth(raw: bytes) -> int:
    """How deep arrays and objects nest in `raw` (brackets inside strings do not count)."""
    depth = deepest = 0
    for byte in _JSON_STRING.sub(b"", raw):
        if byte in (0x5B, 0x7B):  # [ {
            depth += 1
            deepest = max(deepest, depth)
        elif byte in (0x5D, 0x7D):  # ] }
            depth -= 1
    return deepest


MAX_WORKFLOW_BYTES = 4 << 20  # WorkRail's largest workflow is tens of KiB


def _read(path: Path) -> Workflow:
    """One workflow file: a FIFO, a device (a `/dev/zero` symlink) or a file over
    MAX_WORKFLOW_BYTES is skipped at once, never waited on nor read whole (docs/security.md)."""
    raw = read_regular(path, MAX_WORKFLOW_BYTES)
    depth = json_depth(raw)
    if depth > MAX_JSON_DEPTH:
        raise ValueError(f"nested {depth} levels deep; at most {MAX_JSON_DEPTH} are read")
    try:
        return Workflow.model_validate(json.loads(raw))
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    except ValidationError as exc:
        raise ValueError(first_error(exc)) from None
    except RecursionError:  # a shape the depth check let through: still one skipped file
        raise ValueError("nested too deeply to read") from None


def _skip(problems: dict[str, str], name: str, reason: str) -> None:
    problems[name] = reason
    log.warning("workflow file %s skipped: %s", name, reason)


def first_error(exc: ValidationError) -> str:
    error = exc.errors(include_url=False)[0]
    where = ".".join(str(p) for p in error["loc"]) or "file"
    return f"{where}: {error['msg']} ({exc.error_count()} error(s))"
