"""WorkRail's condition language (SEMANTICS §2, `src/utils/condition-evaluator.ts`).

Used by `runCondition`, loop conditions, `promptFragments[].when`, `requireConfirmation`,
parallel delegations and validation rules. Pure. Its rules, kept exactly because a user's
workflow must choose the same steps here as in WorkRail:

- `{"var": x}` looks x up as a flat key (no dot paths); the first operator key present, in
  the order below, decides and any other is ignored; `{"var": x}` alone is JS truthiness;
- `equals` is lenient: strings trimmed and case-insensitive, "3" equals 3, "yes"/"1"/"true"
  equal true, missing equals null; arrays and objects are never equal (JS `===`);
- `gt`/`gte`/`lt`/`lte` hold only for JSON numbers (never "5", never true);
- `contains`/`startsWith`/`endsWith` compare JS `String()` forms, trimmed, case-insensitive;
  `matches` is a case-insensitive regex search; `in` a lenient membership;
- any error anywhere (an unknown shape, `in` without a list, an empty `{}` under `and`)
  makes the whole condition false; no condition, or `{}` at the top, is true.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from daemon.workflows.js import is_number, js_compare, js_number, js_string, js_truthy

ORDERED_OPERATORS = (
    "equals", "not_equals", "gt", "gte", "lt", "lte", "contains", "startsWith", "endsWith", "matches", "in",
)  # fmt: skip


class InvalidCondition(ValueError):
    """A condition that cannot be evaluated; `evaluate` turns it into False."""


def evaluate(condition: Any, context: Mapping[str, Any]) -> bool:
    """True when the step (fragment, loop iteration, ...) is eligible under `context`."""
    if not condition or not isinstance(condition, dict | list):
        return True
    if isinstance(condition, list):  # a JS array is an object with no `var`/`and`/...: invalid
        return False
    try:
        return _evaluate(condition, context)
    except (InvalidCondition, TypeError, ValueError, re.error, RecursionError):
        return False


def _evaluate(condition: Any, context: Mapping[str, Any]) -> bool:
    if not isinstance(condition, dict):
        raise InvalidCondition(f"not a condition: {condition!r}")
    if "var" in condition:
        value = context.get(js_string(condition["var"]))
        for operator in ORDERED_OPERATORS:
            if operator in condition:
                return _OPERATORS[operator](value, condition[operator])
        return js_truthy(value)
    if "and" in condition:
        return all(_evaluate(c, context) for c in _list(condition["and"], "and"))
    if "or" in condition:
        return any(_evaluate(c, context) for c in _list(condition["or"], "or"))
    if "not" in condition:
        return not _evaluate(condition["not"], context)
    raise InvalidCondition(f"invalid condition format: {sorted(condition)}")


def _list(value: Any, operator: str) -> list[Any]:
    if not isinstance(value, list):
        raise InvalidCondition(f"{operator} operator requires an array")
    return value


def lenient_equals(a: Any, b: Any) -> bool:
    """WorkRail's `lenientEquals` (condition-evaluator.ts L37-73)."""
    if a is None and b is None:
        return True
    if a is None or b is None:
        return False
    if isinstance(a, str) and isinstance(b, str):
        return a.strip().lower() == b.strip().lower()
    if (isinstance(a, str) and is_number(b)) or (is_number(a) and isinstance(b, str)):
        na, nb = js_number(a), js_number(b)
        if not math.isnan(na) and not math.isnan(nb):
            return na == nb
    if isinstance(a, str) and isinstance(b, bool):
        text = a.strip().lower()
        return (b and text in ("true", "1", "yes")) or (not b and text in ("false", "0", "no"))
    if isinstance(b, str) and isinstance(a, bool):
        return lenient_equals(b, a)
    return _strict_equals(a, b)


def _strict_equals(a: Any, b: Any) -> bool:
    """JS `===` on JSON values: arrays and objects are distinct objects, so never equal."""
    if isinstance(a, list | dict) or isinstance(b, list | dict):
        return False
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if is_number(a) and is_number(b):
        return bool(a == b)
    return type(a) is type(b) and bool(a == b)


def _normalized(value: Any) -> str:
    return "" if value is None else js_string(value).strip()


def _relational(test: Callable[[float, float], bool]) -> Callable[[Any, Any], bool]:
    def compare(value: Any, operand: Any) -> bool:
        if not is_number(value):
            return False
        numbers = js_compare(value, operand)
        return numbers is not None and test(*numbers)

    return compare


def _matches(value: Any, pattern: Any) -> bool:
    try:
        return re.search(js_string(pattern), _normalized(value), re.IGNORECASE) is not None
    except re.error:
        return False  # an invalid regex is false, as in WorkRail


def _in(value: Any, allowed: Any) -> bool:
    return any(lenient_equals(value, item) for item in _list(allowed, "in"))


_OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    "equals": lenient_equals,
    "not_equals": lambda value, operand: not lenient_equals(value, operand),
    "gt": _relational(lambda a, b: a > b),
    "gte": _relational(lambda a, b: a >= b),
    "lt": _relational(lambda a, b: a < b),
    "lte": _relational(lambda a, b: a <= b),
    "contains": lambda value, operand: _normalized(operand).lower() in _normalized(value).lower(),
    "startsWith": lambda value, operand: _normalized(value).lower().startswith(_normalized(operand).lower()),
    "endsWith": lambda value, operand: _normalized(value).lower().endswith(_normalized(operand).lower()),
    "matches": _matches,
    "in": _in,
}
