"""What a session record says about its workspace (README's Coding sessions): the dispatch's choice of
branch strategy and delivery, and what delivery did.

The record fields are flat strings in the hash like every other field (`branchStrategy`,
`deliveryMode`, `baseRef`, `branch`, `keepWorktree`) except `delivery`, the JSON of
`Delivery`, written by the worker (fenced, `set_fields.lua`) before it finishes the session.
The dispatch field is `delivery` (a mode); on the record the mode is `deliveryMode` and
`delivery` is the outcome, as README's Coding sessions names both. `sandboxRead` (JSON list, the worker's
own, not served) holds the read grants fixed when the workspace was placed (docs/security.md);
`branchExisted` (`1`/`0`, set at the same first placement) whether the branch was in the
repository before the session: then delivery only fast-forwards it.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

log = logging.getLogger(__name__)

BranchStrategy = Literal["none", "read-only", "worktree"]
DeliveryMode = Literal["commit", "push", "none"]
DeliveryState = Literal["delivered", "partial", "failed"]
BRANCH_STRATEGIES: tuple[str, ...] = ("none", "read-only", "worktree")
DELIVERY_MODES: tuple[str, ...] = ("commit", "push", "none")


class WorkspacePlan(BaseModel):
    """The dispatch's workspace fields, as the record keeps them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    branchStrategy: BranchStrategy = "none"
    deliveryMode: DeliveryMode = "commit"
    baseRef: str | None = None  # worktree: where the branch starts (default HEAD)
    branch: str | None = None  # worktree: the branch's name (default worktrain/<sessionId>)
    keepWorktree: bool = False

    def hash_fields(self) -> dict[str, str | int]:
        return {
            "branchStrategy": self.branchStrategy,
            "deliveryMode": self.deliveryMode,
            "baseRef": self.baseRef or "",
            "branch": self.branch or "",
            "keepWorktree": int(self.keepWorktree),
        }


class Delivery(BaseModel):
    """What the end of a worktree session did with its work (README's Coding sessions)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    state: DeliveryState
    branch: str
    baseRef: str
    baseCommit: str | None = Field(
        default=None, description="The commit baseRef resolved to (the branch's merge base)."
    )
    headCommit: str | None = None
    commits: int = Field(default=0, description="Commits on the branch since baseCommit.")
    pushed: bool = False
    remote: str | None = None
    diffStat: str | None = Field(default=None, description="`git diff --stat` of baseRef..branch (capped).")
    worktree: str | None = Field(default=None, description="Where the worktree is (null once removed).")
    snapshots: bool = Field(
        default=False,
        description="Its turns' snapshots were fetched into the main repository (refs/worktrain/snapshots/"
        "<sessionId>/): a fork can be made once the worktree is removed.",
    )
    commandExitCode: int | None = Field(default=None, description="WORKTRAIN_DELIVERY_COMMAND's exit code.")
    error: str | None = None


def workspace_fields(fields: dict[str, str]) -> dict[str, Any]:
    """The record's workspace fields from its hash (older records: the defaults)."""
    strategy = fields.get("branchStrategy") or "none"
    mode = fields.get("deliveryMode") or "commit"
    return {
        "branchStrategy": strategy if strategy in BRANCH_STRATEGIES else "none",
        "deliveryMode": mode if mode in DELIVERY_MODES else "commit",
        "baseRef": fields.get("baseRef") or None,
        "branch": fields.get("branch") or None,
        "keepWorktree": fields.get("keepWorktree") == "1",
        "delivery": _delivery(fields.get("delivery")),
        "sandboxRead": _paths(fields.get("sandboxRead")),
        "branchExisted": fields["branchExisted"] == "1" if fields.get("branchExisted") else None,
    }


def branch_existed(branch_existed: bool | None, branch: str | None, placed_now: bool | None = None) -> bool:
    """Whether delivery may only fast-forward the branch: the record's `branchExisted`, else
    what this attempt's first placement found, else (a record from before the field) whether
    the dispatch named the branch."""
    if branch_existed is not None:
        return branch_existed
    return placed_now if placed_now is not None else bool(branch)


def _paths(raw: str | None) -> list[str] | None:
    """`sandboxRead`: the read grants the worker fixed when it placed the workspace (a JSON list)."""
    if not raw:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        log.warning("the record's sandboxRead field is not a list of paths: %.200s", raw)
        return None
    return value


def _delivery(raw: str | None) -> Delivery | None:
    if not raw:
        return None
    try:
        return Delivery.model_validate(json.loads(raw))
    except (ValueError, ValidationError):
        log.warning("the record's delivery field is not a delivery: %.200s", raw)
        return None
