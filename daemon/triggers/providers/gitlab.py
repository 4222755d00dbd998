"""GitLab (README's Triggers): webhooks as GitLab sends them, and polls of its REST API (v4).

Webhooks: the payload's `object_kind` (merge_request, issue, note, ...) and
`object_attributes.action` (open, update, merge, create, ...) make the event's name
(`merge_request.open`); `X-Gitlab-Token` holds the shared secret itself (compared in
constant time); the delivery id is `Idempotency-Key` (the same on GitLab's retries), else
`X-Gitlab-Event-UUID`. For one template in both modes the item is also given under
`merge_request` / `issue` (a hook carries it as `object_attributes`), and a note as `comment`.

Polls: open merge requests and issues of a project (`GET /projects/{id}/merge_requests?
updated_after=`, oldest update first), 100 a page, the next page from `X-Next-Page` (or
`Link: rel="next"`), `RateLimit-Remaining` / `RateLimit-Reset` (epoch seconds). The API
URL includes `/api/v4` (`https://gitlab.com/api/v4`); the token goes in `PRIVATE-TOKEN`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any
from urllib.parse import quote, urlencode, urlsplit, urlunsplit

from daemon.schema.records import TriggerItem
from daemon.triggers.events import BadPayload, Facts, TriggerEvent, dig, int_of, text_of, timestamp_ms
from daemon.triggers.providers.base import (
    Headers,
    Listing,
    RateLimit,
    parse_link,
    rate_limit_headers,
)

PER_PAGE = 100
LIST_PATH = {"merge_request": "merge_requests", "issues": "issues"}


class GitLab:
    name = "gitlab"

    def verify(self, secret: str, headers: Headers, body: bytes) -> bool:
        given = headers.get("x-gitlab-token", "")
        return hmac.compare_digest(given.encode("latin-1", "replace"), secret.encode())

    def webhook_event(self, headers: Headers, body: bytes) -> TriggerEvent:
        try:
            payload = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            raise BadPayload("the body is not valid JSON") from None
        if not isinstance(payload, dict):
            raise BadPayload("the body must be a JSON object")
        kind = text_of(payload.get("object_kind")) or text_of(payload.get("event_type"))
        if not kind:
            raise BadPayload("object_kind is missing")
        action = text_of(dig(payload, "object_attributes", "action"))
        name = f"{kind}.{action}" if action else kind
        delivery = headers.get("idempotency-key") or headers.get("x-gitlab-event-uuid") or ""
        if not delivery.strip():
            delivery = "sha256-" + hashlib.sha256(body).hexdigest()
        payload = _with_aliases(kind, payload)
        project = text_of(dig(payload, "project", "path_with_namespace"))
        raw = payload.get("merge_request") or payload.get("issue")
        item = _item(raw, project, "merge_request" if "merge_request" in payload else "issue")
        facts = Facts(
            labels=_labels(payload.get("labels")) or _labels(dig(raw, "labels")),
            repo=project,
            project_id=str(dig(payload, "project", "id"))
            if dig(payload, "project", "id") is not None
            else None,
            author=text_of(dig(payload, "user", "username")),
            text=text_of(dig(payload, "object_attributes", "note")) if kind == "note" else None,
        )
        return TriggerEvent(name, delivery.strip(), payload, "webhook", item if raw else None, facts)

    def describe(self, event: TriggerEvent) -> str:
        payload, item = event.payload, event.item
        mark = "!" if item is not None and item.kind == "merge_request" else "#"
        what = f"{mark}{item.number}" if item is not None and item.number is not None else "the item"
        who = text_of(dig(payload, "user", "username")) or "someone"
        if event.name.startswith("note"):
            return f"@{who} commented on {what}:\n\n{text_of(dig(payload, 'comment', 'note')) or ''}".strip()
        title = text_of(dig(payload, "object_attributes", "title"))
        return f"GitLab {event.name} on {what}" + (f": {title}" if title else "")

    def comments_url(self, api_url: str, item: TriggerItem) -> str | None:
        if item.repo is None or item.number is None:
            return None
        kind = "merge_requests" if item.kind == "merge_request" else "issues"
        return f"{api_url}/projects/{quote(item.repo, safe='')}/{kind}/{item.number}/notes"

    def auth_headers(self, token: str) -> dict[str, str]:
        return {"PRIVATE-TOKEN": token, "Accept": "application/json"}

    def listing(self, api_url: str, repo: str, kind: str, cursor: str | None, labels: list[str]) -> Listing:
        query: dict[str, Any] = {
            "state": "opened",
            "order_by": "updated_at",
            "sort": "asc",
            "per_page": PER_PAGE,
        }
        if labels:
            query["labels"] = ",".join(labels)
        if cursor:
            query["updated_after"] = cursor
        path = f"{api_url}/projects/{quote(repo, safe='')}/{LIST_PATH[kind]}"
        return Listing(kind, f"{path}?{urlencode(query)}", newest_first=False)

    def next_page(self, headers: Headers, url: str) -> str | None:
        linked = parse_link(headers.get("link")).get("next")
        if linked:
            return linked
        page = headers.get("x-next-page", "").strip()
        if not page.isdigit():
            return None
        parts = urlsplit(url)
        kept = [p for p in parts.query.split("&") if p and not p.startswith("page=")]
        return urlunsplit(parts._replace(query="&".join([*kept, f"page={page}"])))

    def rate_limit(self, headers: Headers, now_ms: int) -> RateLimit:
        return rate_limit_headers(headers, now_ms, "ratelimit-")

    def polled_event(self, kind: str, item: Any, repo: str) -> TriggerEvent | None:
        if not isinstance(item, dict):
            return None
        updated = text_of(item.get("updated_at"))
        iid = int_of(item.get("iid"))
        if updated is None or iid is None:
            return None
        field = "merge_request" if kind == "merge_request" else "issue"
        version = f"{field}:{iid}@{updated}"
        project = {"id": item.get("project_id"), "path_with_namespace": repo}
        payload = {"object_kind": field, field: item, "object_attributes": item, "project": project}
        facts = Facts(
            labels=_labels(item.get("labels")), repo=repo, author=text_of(dig(item, "author", "username"))
        )
        return TriggerEvent(
            kind, version, payload, "poll", _item(item, repo, field), facts, (version, timestamp_ms(updated))
        )

    def comments_since_url(self, comments_url: str, since: str) -> str:
        # notes have no `since`: the newest 100 first (a comment is looked for right after it was posted)
        return f"{comments_url}?{urlencode({'sort': 'desc', 'order_by': 'created_at', 'per_page': PER_PAGE})}"

    def comment_text(self, comment: Any) -> str:
        return text_of(dig(comment, "body")) or ""


def _with_aliases(kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    attributes = payload.get("object_attributes")
    extra: dict[str, Any] = {}
    if kind == "merge_request" and "merge_request" not in payload:
        extra["merge_request"] = attributes
    elif kind == "issue" and "issue" not in payload:
        extra["issue"] = attributes
    elif kind == "note":
        extra["comment"] = attributes
    return {**payload, **extra}


def _labels(labels: Any) -> tuple[str, ...]:
    """A hook's labels are objects with `title`, the API's are names."""
    if not isinstance(labels, list):
        return ()
    names = (label if isinstance(label, str) else text_of(dig(label, "title")) for label in labels)
    return tuple(name for name in names if name)


def _item(raw: Any, project: str | None, kind: str) -> TriggerItem:
    return TriggerItem(
        provider="gitlab",
        kind="merge_request" if kind == "merge_request" else "issue",
        repo=project,
        number=int_of(dig(raw, "iid")),
        url=text_of(dig(raw, "url")) or text_of(dig(raw, "web_url")),
    )


GITLAB = GitLab()
