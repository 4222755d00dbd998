"""400 for an unknown workflowId, with the near matches (difflib) and where the catalog is.

`Unknown workflowId 'explore-and-documnet'. Did you mean 'explore-and-document'? `worktrain
workflows` (GET /api/v2/workflows) lists every workflow.` — the body also carries
`suggestions` (a list, possibly empty) so a client or an agent can pick one.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from web.errors import ApiError

MAX_SUGGESTIONS = 3
CUTOFF = 0.6  # difflib's ratio: one or two typos in an id of 10+ characters pass
CATALOG_POINTER = "`worktrain workflows` (GET /api/v2/workflows) lists every workflow."


def near_matches(wanted: str, known: Iterable[str]) -> list[str]:
    """The known ids closest to `wanted`, best first; an id differing only in case first."""
    ids = list(known)
    folded = [i for i in ids if i.lower() == wanted.lower()]
    close = difflib.get_close_matches(wanted.lower(), [i.lower() for i in ids], MAX_SUGGESTIONS, CUTOFF)
    by_lower = {i.lower(): i for i in ids}
    found = folded + [by_lower[c] for c in close if by_lower[c] not in folded]
    return found[:MAX_SUGGESTIONS]


def unknown_workflow(workflow_id: str, known: Iterable[str]) -> ApiError:
    shown = workflow_id[:200]
    suggestions = near_matches(shown, known)
    hint = ""
    if suggestions:
        hint = " Did you mean " + " or ".join(repr(s) for s in suggestions) + "?"
    return ApiError(
        400,
        "invalid_request",
        f"Unknown workflowId {shown!r}.{hint} {CATALOG_POINTER}",
        {"suggestions": suggestions},
    )
