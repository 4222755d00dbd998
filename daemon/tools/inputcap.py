"""Byte caps on the free-form parts of a tool's input (docs/security.md, issue 29 item 11).

`signal_coordinator`'s `data` and `report_issue`'s `context` are stored in Redis, mirrored
to JSONL and printed by the CLI; unbounded, one call put 2 MB (500 KB) in each. A value over
the cap is refused by the input model's validation, so the model gets a tool error saying
so and can send a shorter one.
"""

from __future__ import annotations

import json
from typing import Any

FREE_FORM_CAP_BYTES = 64 * 1024


def within_cap(value: Any, field: str, cap: int = FREE_FORM_CAP_BYTES) -> Any:
    """`value` unchanged if its compact JSON (UTF-8) is at most `cap` bytes, else ValueError."""
    if value is None:
        return value
    size = len(json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str).encode())
    if size > cap:
        raise ValueError(
            f"{field} is {size} bytes; at most {cap} are accepted: send a summary, or a path to a file"
        )
    return value
