"""Reading the triggers file (README's Triggers): YAML to TriggerSpecs, every problem named
with the file, the line and the field (`triggers.yml:12: fix-issues.goal: bad template: ...`).

PyYAML's safe loader builds the values (no Python tags); its composed node tree gives each
key and entry its line, so pydantic's error locations map back to the line that holds
them. Problems are collected, not stopped at the first: one run of `worktrain triggers
--check` lists all of them. The checks that need more than the file (the catalog, the
workspace roots, the environment holding the secrets) are `check_catalog` and `check_secrets`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from daemon.triggers.spec import TriggerSpec
from daemon.triggers.templates import Template, TemplateProblem, compile_context, compile_template

MAX_FILE_BYTES = 1024 * 1024
Loc = tuple[str | int, ...]


@dataclass(frozen=True)
class Problem:
    line: int | None
    field: str  # `<trigger id or #n>.<field path>`, or `file`
    message: str


class TriggerFileError(ValueError):
    """The triggers file cannot be used: each problem with its line and field."""

    def __init__(self, path: Path, problems: list[Problem]) -> None:
        self.path = path
        self.problems = problems
        super().__init__("\n".join(self.lines()))

    def lines(self) -> list[str]:
        return [
            f"{self.path}:{p.line}: {p.field}: {p.message}"
            if p.line
            else f"{self.path}: {p.field}: {p.message}"
            for p in self.problems
        ]


@dataclass(frozen=True)
class Trigger:
    """One entry, validated, its templates compiled."""

    spec: TriggerSpec
    line: int
    goal: Template
    context: Any  # the `context` object with Templates for its strings
    key: Template | None
    steer: Template | None
    lines: Mapping[Loc, int] = field(default_factory=dict, compare=False, repr=False)

    @property
    def id(self) -> str:
        return self.spec.id

    def line_of(self, *loc: str | int) -> int:
        return _line_for(self.lines, loc) or self.line


@dataclass(frozen=True)
class TriggerSet:
    """The file's triggers by id (empty: no file, or an empty one)."""

    path: Path | None = None
    triggers: Mapping[str, Trigger] = field(default_factory=dict)

    def get(self, trigger_id: str) -> Trigger | None:
        return self.triggers.get(trigger_id)

    def __iter__(self) -> Any:
        return iter(self.triggers.values())

    def __len__(self) -> int:
        return len(self.triggers)

    def polled(self) -> list[Trigger]:
        return [t for t in self if t.spec.mode == "poll"]


def read_triggers(path: Path, required: bool = False) -> TriggerSet:
    """The file's triggers; a missing file is an empty set unless `required` (it was named
    explicitly). Raises TriggerFileError for anything else that is wrong."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        if required:
            raise TriggerFileError(path, [Problem(None, "file", "no such file")]) from None
        return TriggerSet(path)
    except OSError as exc:
        raise TriggerFileError(path, [Problem(None, "file", f"cannot be read: {exc.strerror}")]) from None
    if len(raw) > MAX_FILE_BYTES:
        raise TriggerFileError(path, [Problem(None, "file", f"larger than {MAX_FILE_BYTES} bytes")])
    return parse_triggers(raw.decode("utf-8", errors="replace"), path)


def parse_triggers(text: str, path: Path) -> TriggerSet:
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.load(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise TriggerFileError(
            path, [Problem(line, "file", f"not valid YAML: {_yaml_reason(exc)}")]
        ) from None
    if data is None:
        return TriggerSet(path)
    if not isinstance(data, list) or not isinstance(root, yaml.SequenceNode):
        line = root.start_mark.line + 1 if root is not None else 1
        raise TriggerFileError(path, [Problem(line, "file", "must be a list of triggers (`- id: ...`)")])
    problems: list[Problem] = []
    found: dict[str, Trigger] = {}
    for index, (entry, node) in enumerate(zip(data, root.value, strict=True)):
        lines: dict[Loc, int] = {}
        problems += _walk(node, (), lines, _name(index, entry))
        trigger = _entry(index, entry, node.start_mark.line + 1, lines, problems)
        if trigger is None:
            continue
        if trigger.id in found:
            where = found[trigger.id].line
            problems.append(
                Problem(trigger.line_of("id"), f"{trigger.id}.id", f"used twice (first at line {where})")
            )
            continue
        found[trigger.id] = trigger
    if problems:
        raise TriggerFileError(path, problems)
    return TriggerSet(path, found)


def _entry(
    index: int, entry: Any, line: int, lines: dict[Loc, int], problems: list[Problem]
) -> Trigger | None:
    """One entry validated and compiled, or None with its problems added to `problems`."""
    name = _name(index, entry)
    if not isinstance(entry, dict):
        problems.append(Problem(line, name, "each trigger is a mapping (`id: ...`, `source: ...`)"))
        return None
    try:
        spec = TriggerSpec.model_validate(entry)
    except ValidationError as exc:
        for error in exc.errors(include_url=False, include_input=False):
            loc = tuple(error["loc"])
            problems.append(Problem(_line_for(lines, loc) or line, _field(name, loc), _message(error)))
        return None
    own: list[Problem] = []

    def compiled(source: str | None, field_name: str) -> Template | None:
        if source is None:
            return None
        try:
            return compile_template(source, field_name)
        except TemplateProblem as exc:
            own.append(Problem(_line_for(lines, (field_name,)) or line, f"{name}.{exc.field}", exc.message))
            return None

    goal, key, steer = compiled(spec.goal, "goal"), compiled(spec.key, "key"), compiled(spec.steer, "steer")
    context = None
    try:
        context = compile_context(spec.context) if spec.context is not None else None
    except TemplateProblem as exc:
        loc = tuple(exc.field.split("."))
        own.append(Problem(_line_for(lines, loc) or line, f"{name}.{exc.field}", exc.message))
    problems += own
    if own or goal is None:
        return None
    return Trigger(spec, line, goal, context, key, steer, lines)


def _name(index: int, entry: Any) -> str:
    """How problems name an entry: its id, else its place (`#2`)."""
    given = entry.get("id") if isinstance(entry, dict) else None
    return given if isinstance(given, str) and given else f"#{index + 1}"


def _walk(node: yaml.Node, loc: Loc, lines: dict[Loc, int], name: str = "file") -> list[Problem]:
    """Each key's and item's line under `node`, by its location; duplicate keys are problems."""
    problems: list[Problem] = []
    lines[loc] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value)
            if key in seen:
                problems.append(
                    Problem(
                        key_node.start_mark.line + 1,
                        ".".join([name, *map(str, loc)]),
                        f"{key!r} given twice",
                    )
                )
            seen.add(key)
            lines[(*loc, key)] = key_node.start_mark.line + 1
            problems += _walk(value_node, (*loc, key), lines, name)
            lines[(*loc, key)] = key_node.start_mark.line + 1  # the key's line, not its value's
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            problems += _walk(item, (*loc, i), lines, name)
    return problems


def _line_for(lines: Mapping[Loc, int], loc: Loc) -> int | None:
    """The line of the longest known prefix of `loc` (pydantic adds union tags and such)."""
    for end in range(len(loc), 0, -1):
        if loc[:end] in lines:
            return lines[loc[:end]]
    return None


def _field(name: str, loc: Loc) -> str:
    parts = [str(p) for p in loc if not (isinstance(p, str) and p in ("str", "list[str]", "function-after"))]
    return ".".join([name, *parts]) if parts else name


def _message(error: Any) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "missing":
        return "required"
    message = str(error["msg"])
    return message.removeprefix("Value error, ")


def _yaml_reason(exc: yaml.YAMLError) -> str:
    problem = getattr(exc, "problem", None)
    return str(problem or exc).splitlines()[0][:200]


# --- what the file names outside itself ---------------------------------------------------


def check_secrets(
    triggers: TriggerSet, needs: Iterable[str], lookup: Callable[[str], str | None]
) -> list[Problem]:
    """Every variable the file names for `needs` ("secret": webhook secrets, the web's; "token":
    API tokens, the worker's) that `lookup` does not find (never its value)."""
    wanted = set(needs)
    problems = []
    for trigger in triggers:
        spec = trigger.spec
        for kind, field_name, name in (
            ("secret", "secretEnv", spec.secretEnv),
            ("token", "tokenEnv", spec.tokenEnv),
        ):
            if kind in wanted and name is not None and not lookup(name):
                problems.append(
                    Problem(
                        trigger.line_of(field_name),
                        f"{spec.id}.{field_name}",
                        f"the variable {name} is not set",
                    )
                )
    return problems


def check_catalog(
    triggers: TriggerSet, workflows: Iterable[str], refusal: Callable[[str], str | None]
) -> list[Problem]:
    """Each trigger's workflow is in the catalog, its workspace a place sessions may work
    (`refusal(path)`: the reason it may not, daemon/sandbox/roots.py)."""
    known = set(workflows)
    problems = []
    for trigger in triggers:
        spec = trigger.spec
        if spec.workflowId not in known:
            problems.append(
                Problem(
                    trigger.line_of("workflowId"), f"{spec.id}.workflowId", f"no workflow {spec.workflowId!r}"
                )
            )
        why = refusal(spec.workspacePath)
        if why is not None:
            problems.append(Problem(trigger.line_of("workspacePath"), f"{spec.id}.workspacePath", why))
    return problems
