"""`worktrain session ID`'s summary names the delivery's base as a commit (issue 33's polish:
`baseRef "HEAD"` said nothing once HEAD had moved on)."""

from __future__ import annotations

import pytest

from cli.sessionview import delivery_text

pytestmark = pytest.mark.unit

HEAD = "9f3c2a1b7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a"
BASE = "1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b"


def delivered(**fields: object) -> dict[str, object]:
    delivery = {"state": "delivered", "branch": "worktrain/sess_x", "headCommit": HEAD, "commits": 2}
    return {"branchStrategy": "worktree", "delivery": {**delivery, **fields}}


def test_the_base_is_shown_as_the_commit_it_resolved_to() -> None:
    text = delivery_text(delivered(baseRef="HEAD", baseCommit=BASE))
    assert "commit 9f3c2a1b7d6e (2 since 1a2b3c4d5e6f)" in text, text
    assert "HEAD" not in text


def test_a_named_base_ref_is_kept_beside_its_commit() -> None:
    text = delivery_text(delivered(baseRef="main", baseCommit=BASE))
    assert "(2 since 1a2b3c4d5e6f (main))" in text, text


def test_a_delivery_recorded_before_base_commits_were_kept_shows_its_ref() -> None:
    assert "(2 since HEAD)" in delivery_text(delivered(baseRef="HEAD"))
