"""A trigger's templates (`goal`, `context`, `key`, `steer`): Jinja in a sandbox.

jinja2's SandboxedEnvironment: a template reaches the event's data and nothing else — no
attribute starting with `_`, no Python object's internals, no file, no import. StrictUndefined:
a field the event does not have is an error on that fire (`RenderError`, naming the field),
never an empty string and never a crash. `*` and `**` are bounded, and so is what a
template renders, so a template cannot build an unbounded text.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jinja2
from jinja2 import StrictUndefined, TemplateError, nodes
from jinja2.exceptions import SecurityError
from jinja2.sandbox import SandboxedEnvironment

MAX_RENDERED_CHARS = 256 * 1024
MAX_REPEAT = 10_000


class TemplateProblem(ValueError):
    """A template that does not compile (checked when the file is read)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class RenderError(ValueError):
    """A template that does not render for this event."""


class _Environment(SandboxedEnvironment):
    intercepted_binops = frozenset({"*", "**"})

    def call_binop(self, context: Any, operator_: str, left: Any, right: Any) -> Any:
        if operator_ == "**" and isinstance(right, int) and abs(right) > 64:
            raise SecurityError("exponent too large")
        if (
            operator_ == "*"
            and isinstance(right, int)
            and isinstance(left, str | list)
            and right > MAX_REPEAT
        ):
            raise SecurityError("repetition too large")
        if operator_ == "*" and isinstance(left, int) and isinstance(right, str | list) and left > MAX_REPEAT:
            raise SecurityError("repetition too large")
        return operator.mul(left, right) if operator_ == "*" else operator.pow(left, right)


_ENV = _Environment(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=False)


@dataclass(frozen=True)
class Template:
    source: str
    field: str  # goal, context.issueUrl, key, steer: said in errors
    compiled: jinja2.Template = dataclasses.field(compare=False, repr=False)

    def render(self, variables: Mapping[str, Any]) -> str:
        try:
            text = self.compiled.render(variables)
        except (TemplateError, SecurityError, ArithmeticError, TypeError, ValueError) as exc:
            raise RenderError(f"{self.field}: {_sentence(exc)}") from None
        if len(text) > MAX_RENDERED_CHARS:
            raise RenderError(f"{self.field}: renders to more than {MAX_RENDERED_CHARS} characters")
        return text


def compile_template(source: str, field: str) -> Template:
    """The template, or TemplateProblem with Jinja's reason (its line within the template)."""
    try:
        parsed = _ENV.parse(source)
    except TemplateError as exc:
        line = getattr(exc, "lineno", None)
        where = f" (template line {line})" if line and "\n" in source else ""
        raise TemplateProblem(field, f"bad template{where}: {exc.message or exc}") from None
    for node in parsed.find_all((nodes.Extends, nodes.Include, nodes.Import, nodes.FromImport)):
        raise TemplateProblem(field, f"bad template: {type(node).__name__.lower()} is not allowed")
    return Template(source, field, _ENV.from_string(source))


def compile_context(value: Any, field: str = "context") -> Any:
    """A `context` object with every string in it compiled (nested objects and lists too)."""
    if isinstance(value, str):
        return compile_template(value, field)
    if isinstance(value, dict):
        return {key: compile_context(item, f"{field}.{key}") for key, item in value.items()}
    if isinstance(value, list):
        return [compile_context(item, f"{field}[{i}]") for i, item in enumerate(value)]
    return value


def render_context(value: Any, variables: Mapping[str, Any]) -> Any:
    if isinstance(value, Template):
        return value.render(variables)
    if isinstance(value, dict):
        return {key: render_context(item, variables) for key, item in value.items()}
    if isinstance(value, list):
        return [render_context(item, variables) for item in value]
    return value


def _sentence(exc: Exception) -> str:
    message = getattr(exc, "message", None) or str(exc)
    if "is undefined" in message or "has no attribute" in message:
        return f"the event has no such field ({message})"
    return message[:300]
