"""An event a trigger judges (README's Triggers): a webhook's or a polled item's, one shape.

Pure. `payload` is what the templates see: the provider's JSON as it sent it (a polled item
wrapped the way the provider's webhook wraps it: an issue as `issue`, a pull request as
`pull_request`, a merge request as `merge_request`), plus `trigger` (its id, the event's
name, the delivery id). `facts` is what the filter looks at, read once by the provider.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from daemon.schema.records import TriggerItem

OWN_MARK = "<!-- worktrain"  # starts the hidden line of every comment WorkTrain posts (reportback.py)


class BadPayload(ValueError):
    """A request body that is not the JSON object the provider sends (400)."""


@dataclass(frozen=True)
class Facts:
    """What `filter` looks at."""

    labels: tuple[str, ...] = ()
    label_added: str | None = None  # a `*.labeled` event: the label just added
    repo: str | None = None  # github owner/name, gitlab project path (or id)
    project_id: str | None = None  # gitlab: the project's numeric id
    author: str | None = None  # who acted: a webhook's sender, a polled item's author
    text: str | None = None  # a comment's body (WorkTrain's own comments are passed over)


@dataclass(frozen=True)
class TriggerEvent:
    name: str  # issues.labeled, issue_comment.created, merge_request.open, pull_request (a poll)
    delivery_id: str  # the provider's delivery id; a poll: `<item>@<updated_at>`
    payload: dict[str, Any]
    source: Literal["webhook", "poll"]
    item: TriggerItem | None = None
    facts: Facts = field(default_factory=Facts)
    version: tuple[str, int] | None = None  # a poll: (`<item>@<updated_at>`, updated_at in ms)

    def variables(self, trigger_id: str) -> dict[str, Any]:
        """What a template sees."""
        return {
            **self.payload,
            "trigger": {"id": trigger_id, "event": self.name, "deliveryId": self.delivery_id},
        }


def timestamp_ms(text: str) -> int:
    """A provider's timestamp (`2024-05-01T10:00:00Z`, `...000+02:00`, GitLab's
    `2024-05-01 10:00:00 UTC`) in ms since the epoch; BadPayload when it is none."""
    cleaned = text.strip().replace(" UTC", "+00:00")
    try:
        moment = datetime.fromisoformat(cleaned.replace("Z", "+00:00"))
    except ValueError:
        raise BadPayload(f"not a timestamp: {text[:40]!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def dig(payload: Any, *path: str) -> Any:
    """payload[path[0]][path[1]]... or None where a step is missing or not an object."""
    for step in path:
        if not isinstance(payload, dict):
            return None
        payload = payload.get(step)
    return payload


def text_of(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def int_of(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
