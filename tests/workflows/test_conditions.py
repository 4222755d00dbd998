"""The condition language (SEMANTICS §2): every operator, lenient equality, missing
variables, precedence of keys, and what makes a condition false."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.workflows.conditions import evaluate, lenient_equals
from daemon.workflows.js import js_number, js_string, js_truthy

pytestmark = pytest.mark.unit

CTX: dict[str, Any] = {
    "mode": "Simple",
    "padded": "  yes ",
    "n": 3,
    "f": 2.5,
    "zero": 0,
    "t": True,
    "no": False,
    "numstr": "3",
    "empty": "",
    "none": None,
    "list": [1, "a"],
    "obj": {"k": 1},
    "falsestr": "false",
    "emptylist": [],
    "a.b": "dotted",
}


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        # equals: lenient
        ({"var": "mode", "equals": "simple"}, True),  # case-insensitive (V1)
        ({"var": "mode", "equals": " SIMPLE "}, True),  # trimmed
        ({"var": "numstr", "equals": 3}, True),  # "3" == 3
        ({"var": "n", "equals": "3.0"}, True),
        ({"var": "n", "equals": 3.0}, True),  # ints and floats are both numbers
        ({"var": "padded", "equals": True}, True),  # "yes" == true (Q10)
        ({"var": "falsestr", "equals": False}, True),
        ({"var": "t", "equals": "1"}, True),
        ({"var": "n", "equals": "abc"}, False),  # NaN: strict, and 3 !== "abc"
        ({"var": "t", "equals": 1}, False),  # booleans are not numbers
        ({"var": "zero", "equals": False}, False),
        ({"var": "missing", "equals": None}, True),  # missing == null
        ({"var": "none", "equals": None}, True),
        ({"var": "missing", "equals": "x"}, False),
        ({"var": "list", "equals": [1, "a"]}, False),  # arrays never equal (JS ===)
        ({"var": "obj", "equals": {"k": 1}}, False),
        # not_equals
        ({"var": "missing", "not_equals": "x"}, True),  # a missing variable is not equal
        ({"var": "mode", "not_equals": "SIMPLE"}, False),
        ({"var": "emptylist", "not_equals": []}, True),  # always true with a literal array (V7)
        # relational: JSON numbers only
        ({"var": "n", "gt": 2}, True),
        ({"var": "n", "gt": 3}, False),
        ({"var": "n", "gte": 3}, True),
        ({"var": "f", "lt": 3}, True),
        ({"var": "n", "lte": 3}, True),
        ({"var": "n", "lte": 2.9}, False),
        ({"var": "numstr", "gt": 1}, False),  # numeric strings never match
        ({"var": "t", "gte": 0}, False),  # true is not a number
        ({"var": "missing", "lt": 100}, False),
        # string operators on JS String() forms
        ({"var": "mode", "contains": "IMP"}, True),
        ({"var": "list", "contains": "1,A"}, True),  # String([1, "a"]) == "1,a"
        ({"var": "missing", "contains": ""}, True),  # only "" is in a missing value
        ({"var": "missing", "contains": "x"}, False),
        ({"var": "mode", "startsWith": "sim"}, True),
        ({"var": "mode", "endsWith": "PLE"}, True),
        ({"var": "mode", "endsWith": "sim"}, False),
        ({"var": "mode", "matches": "^s.*e$"}, True),  # case-insensitive
        ({"var": "mode", "matches": "("}, False),  # an invalid regex is false
        ({"var": "obj", "contains": "object"}, True),  # "[object Object]"
        # in: lenient membership
        ({"var": "mode", "in": ["complex", "SIMPLE"]}, True),
        ({"var": "numstr", "in": [1, 2, 3]}, True),
        ({"var": "mode", "in": ["x"]}, False),
        ({"var": "mode", "in": "simple"}, False),  # not a list: an error, so false
        # truthiness of a bare var
        ({"var": "mode"}, True),
        ({"var": "falsestr"}, True),  # "false" is truthy in JS
        ({"var": "emptylist"}, True),
        ({"var": "empty"}, False),
        ({"var": "zero"}, False),
        ({"var": "none"}, False),
        ({"var": "missing"}, False),  # Q4
        # flat keys only: no dot paths
        ({"var": "a.b", "equals": "dotted"}, True),
        ({"var": "obj.k", "equals": 1}, False),
    ],
)
def test_operator(condition: dict[str, Any], expected: bool) -> None:
    assert evaluate(condition, CTX) is expected


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        (None, True),
        ({}, True),  # no condition: eligible
        ([], True),
        ([{"var": "mode"}], False),  # a non-empty array is no condition format
        ({"and": [{"var": "mode", "equals": "simple"}, {"var": "n", "gt": 1}]}, True),
        ({"and": [{"var": "mode", "equals": "simple"}, {"var": "n", "gt": 5}]}, False),
        ({"and": []}, True),
        ({"or": []}, False),
        ({"or": [{"var": "missing"}, {"var": "t"}]}, True),
        ({"not": {"var": "missing"}}, True),
        ({"not": {"not": {"var": "t"}}}, True),
        ({"and": [{}]}, False),  # {} under `and` is an invalid format: the whole is false
        ({"not": {"bogus": 1}}, False),  # an error under `not` is false, not negated
        ({"and": "x"}, False),
        ({"or": [None]}, False),
        ({"bogus": 1}, False),
    ],
)
def test_logic_and_invalid_forms(condition: Any, expected: bool) -> None:
    assert evaluate(condition, CTX) is expected


def test_the_first_operator_in_order_decides_and_others_are_ignored() -> None:
    # equals comes before gt: {equals: 3, gt: 100} is true for n == 3
    assert evaluate({"var": "n", "gt": 100, "equals": 3}, CTX)
    # gt before contains
    assert not evaluate({"var": "n", "contains": "3", "gt": 5}, CTX)
    # `var` wins over `and` in the same object
    assert evaluate({"var": "t", "and": [{"var": "missing"}]}, CTX)


def test_lenient_equals_table() -> None:
    assert lenient_equals(None, None) and not lenient_equals(None, 0)
    assert lenient_equals("", 0)  # JS Number("") is 0
    assert lenient_equals(" 0x10 ", 16)
    assert not lenient_equals("1_000", 1000)  # not a JS number
    assert lenient_equals("no", False) and not lenient_equals("maybe", False)
    assert not lenient_equals(True, 1) and lenient_equals(True, True)


def test_js_semantics_helpers() -> None:
    assert [js_string(v) for v in (1.0, 0.1, 1e21, 1.5e-7, 1e-5, True, None, [1, None, [2]], {})] == [
        "1",
        "0.1",
        "1e+21",
        "1.5e-7",
        "0.00001",
        "true",
        "null",
        "1,,2",
        "[object Object]",
    ]
    assert js_number("  12 ") == 12 and js_number("5.") == 5 and js_number("-Infinity") == float("-inf")
    assert [js_truthy(v) for v in ("", "0", 0, 0.0, [], {}, None)] == [
        False,
        True,
        False,
        False,
        True,
        True,
        False,
    ]
