"""JavaScript value semantics, where WorkRail's behaviour depends on them (it runs on Node).

Conditions compare and stringify context values the way JS does (`Number("3")`, `String([1,
"a"])`, truthiness), and `{{var}}` templates show a value as JS `String(value)` would. A
JSON value here is what `json.loads` gives: None, bool, int, float, str, list, dict.
Booleans are not numbers (JS `typeof true` is "boolean"), which Python's `bool <: int`
would otherwise blur.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from typing import Any

_DECIMAL = re.compile(r"[+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)")
_RADIX = re.compile(r"0(?:[xX][0-9a-fA-F]+|[oO][0-7]+|[bB][01]+)")
_INFINITY = re.compile(r"[+-]?Infinity")


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def js_number(value: Any) -> float:
    """JS `Number(value)` for the primitives (NaN for anything it cannot read)."""
    if value is None:
        return 0.0
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if is_number(value):
        return float(value)
    if not isinstance(value, str):
        return math.nan
    text = value.strip()
    if not text:
        return 0.0
    if _DECIMAL.fullmatch(text):
        return float(text)
    if _RADIX.fullmatch(text):
        return float(int(text, 0))
    if _INFINITY.fullmatch(text):
        return -math.inf if text.startswith("-") else math.inf
    return math.nan


def js_typeof(value: Any) -> str:
    """JS `typeof`, with "null" and "array" told apart as WorkRail's messages do."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if is_number(value):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list | tuple) else "object"


def js_truthy(value: Any) -> bool:
    """JS `!!value`: "", 0, NaN, null are false; "false", [] and {} are true."""
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    if is_number(value):
        return value != 0 and not math.isnan(value)
    if isinstance(value, str):
        return value != ""
    return True


def js_string(value: Any) -> str:
    """JS `String(value)`: arrays joined with "," (null items empty), objects "[object Object]"."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if is_number(value):
        return _number_string(float(value)) if isinstance(value, float) else str(value)
    if isinstance(value, str):
        return value
    if isinstance(value, list | tuple):
        return ",".join("" if item is None else js_string(item) for item in value)
    return "[object Object]"


def _number_string(x: float) -> str:
    """ECMAScript Number::toString: the shortest digits, exponent form below 1e-6 or from 1e21."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0:
        return "0"
    sign = "-" if x < 0 else ""
    shortest = Decimal(repr(abs(x))).normalize().as_tuple()  # repr: the shortest round-trip digits
    digits = "".join(map(str, shortest.digits))
    k, n = len(digits), len(digits) + int(shortest.exponent)  # n: where the point goes
    if k <= n <= 21:
        return sign + digits + "0" * (n - k)
    if 0 < n <= 21:
        return sign + digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return sign + "0." + "0" * -n + digits
    exp = n - 1
    tail = "." + digits[1:] if k > 1 else ""
    return f"{sign}{digits[0]}{tail}e{'+' if exp >= 0 else '-'}{abs(exp)}"


def js_compare(value: Any, operand: Any) -> tuple[float, float] | None:
    """Both sides of a relational comparison as numbers, or None when either is NaN."""
    left, right = js_number(value), js_number(operand)
    if math.isnan(left) or math.isnan(right):
        return None
    return left, right
