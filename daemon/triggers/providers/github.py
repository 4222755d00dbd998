"""GitHub (README's Triggers): webhooks as GitHub sends them, and polls of its REST API.

Webhooks: `X-GitHub-Event` (issues, issue_comment, pull_request, ...) and the payload's
`action` make the event's name (`issues.labeled`); `X-GitHub-Delivery` (a GUID, the same on
a redelivery) is its delivery id; `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the raw
body>` its signature. The body is JSON, or a form with the JSON in `payload` (the hook's
"application/x-www-form-urlencoded" content type).

Polls: open issues (`GET /repos/{repo}/issues?since=`, oldest update first: the issues list
also holds pull requests, passed over here) and open pull requests (`GET /repos/{repo}/pulls
?sort=updated&direction=desc`: no `since`, read until an older item), 100 a page, the next
page from `Link: rel="next"`, `X-RateLimit-Remaining` / `X-RateLimit-Reset` (epoch seconds).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any, Literal
from urllib.parse import parse_qs, quote, urlencode

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
ITEM_OF_EVENT = {
    "issues": "issue",
    "issue_comment": "issue",
    "pull_request": "pull_request",
    "pull_request_review": "pull_request",
    "pull_request_review_comment": "pull_request",
    "pull_request_review_thread": "pull_request",
}


class GitHub:
    name = "github"

    def verify(self, secret: str, headers: Headers, body: bytes) -> bool:
        given = headers.get("x-hub-signature-256", "")
        expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
        return hmac.compare_digest(given.encode("latin-1", "replace"), expected.encode())

    def webhook_event(self, headers: Headers, body: bytes) -> TriggerEvent:
        event = headers.get("x-github-event", "").strip()
        delivery = headers.get("x-github-delivery", "").strip()
        if not event:
            raise BadPayload("X-GitHub-Event is missing")
        payload = _payload(headers, body)
        action = text_of(payload.get("action"))
        name = f"{event}.{action}" if action else event
        if not delivery:
            delivery = "sha256-" + hashlib.sha256(body).hexdigest()
        item_field = ITEM_OF_EVENT.get(event)
        raw_item = payload.get(item_field) if item_field else None
        repo = text_of(dig(payload, "repository", "full_name"))
        item = _item(raw_item, repo) if isinstance(raw_item, dict) else None
        facts = Facts(
            labels=_labels(raw_item),
            label_added=text_of(dig(payload, "label", "name"))
            if action in ("labeled", "unlabeled")
            else None,
            repo=repo,
            author=text_of(dig(payload, "sender", "login")),
            text=text_of(dig(payload, "comment", "body")),
        )
        return TriggerEvent(name, delivery, payload, "webhook", item, facts)

    def describe(self, event: TriggerEvent) -> str:
        payload, item = event.payload, event.item
        what = f"#{item.number}" if item is not None and item.number is not None else "the item"
        who = text_of(dig(payload, "sender", "login")) or "someone"
        if event.name.startswith(("issue_comment.", "pull_request_review_comment.")):
            where = text_of(dig(payload, "comment", "path"))
            on = f"{what} ({where})" if where else what
            return f"@{who} commented on {on}:\n\n{text_of(dig(payload, 'comment', 'body')) or ''}".strip()
        if event.name.startswith("pull_request_review."):
            state = text_of(dig(payload, "review", "state")) or "reviewed"
            body = text_of(dig(payload, "review", "body")) or ""
            return f"@{who} reviewed {what} ({state}):\n\n{body}".strip()
        if event.name.endswith((".labeled", ".unlabeled")):
            verb = "labelled" if event.name.endswith(".labeled") else "unlabelled"
            return f"@{who} {verb} {what} {text_of(dig(payload, 'label', 'name')) or ''}".strip()
        title = text_of(dig(payload, ITEM_OF_EVENT.get(event.name.split(".")[0], "issue"), "title"))
        return f"GitHub {event.name} on {what}" + (f": {title}" if title else "")

    def comments_url(self, api_url: str, item: TriggerItem) -> str | None:
        if item.repo is None or item.number is None or not _is_repo(item.repo):
            return None
        return f"{api_url}/repos/{item.repo}/issues/{item.number}/comments"

    def auth_headers(self, token: str) -> dict[str, str]:
        return {
            "Authorization": f"Bearer {token}",
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
        }

    def listing(self, api_url: str, repo: str, kind: str, cursor: str | None, labels: list[str]) -> Listing:
        if not _is_repo(repo):
            raise ValueError(f"repo {repo!r} is not owner/name")
        if kind == "pull_request":
            query = {"state": "open", "sort": "updated", "direction": "desc", "per_page": PER_PAGE}
            return Listing(kind, f"{api_url}/repos/{repo}/pulls?{urlencode(query)}", newest_first=True)
        query = {"state": "open", "sort": "updated", "direction": "asc", "per_page": PER_PAGE}
        if labels:
            query["labels"] = ",".join(labels)
        if cursor:
            query["since"] = cursor
        return Listing(kind, f"{api_url}/repos/{repo}/issues?{urlencode(query)}", newest_first=False)

    def next_page(self, headers: Headers, url: str) -> str | None:
        return parse_link(headers.get("link")).get("next")

    def rate_limit(self, headers: Headers, now_ms: int) -> RateLimit:
        return rate_limit_headers(headers, now_ms, "x-ratelimit-")

    def polled_event(self, kind: str, item: Any, repo: str) -> TriggerEvent | None:
        if not isinstance(item, dict):
            return None
        if kind == "issues" and "pull_request" in item:
            return None  # the issues list holds pull requests too
        updated = text_of(item.get("updated_at"))
        number = int_of(item.get("number"))
        if updated is None or number is None:
            return None
        field = "pull_request" if kind == "pull_request" else "issue"
        version = f"{field}:{number}@{updated}"
        payload = {
            "action": "polled",
            field: item,
            "repository": {"full_name": repo},
            "sender": item.get("user"),
        }
        facts = Facts(labels=_labels(item), repo=repo, author=text_of(dig(item, "user", "login")))
        return TriggerEvent(
            kind, version, payload, "poll", _item(item, repo), facts, (version, timestamp_ms(updated))
        )

    def comments_since_url(self, comments_url: str, since: str) -> str:
        return f"{comments_url}?{urlencode({'since': since, 'per_page': PER_PAGE})}"

    def comment_text(self, comment: Any) -> str:
        return text_of(dig(comment, "body")) or ""


def _payload(headers: Headers, body: bytes) -> dict[str, Any]:
    content_type = headers.get("content-type", "").split(";", 1)[0].strip().lower()
    try:
        if content_type == "application/x-www-form-urlencoded":
            form = parse_qs(body.decode("utf-8"), strict_parsing=False)
            text = form.get("payload", [""])[0]
            payload = json.loads(text)
        else:
            payload = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise BadPayload("the body is not valid JSON") from None
    if not isinstance(payload, dict):
        raise BadPayload("the body must be a JSON object")
    return payload


def _labels(item: Any) -> tuple[str, ...]:
    labels = dig(item, "labels") if isinstance(item, dict) else None
    if not isinstance(labels, list):
        return ()
    return tuple(name for label in labels if (name := text_of(dig(label, "name"))))


def _item(raw: dict[str, Any], repo: str | None) -> TriggerItem:
    kind: Literal["issue", "pull_request"] = (
        "pull_request" if ("pull_request" in raw or "head" in raw) else "issue"
    )
    return TriggerItem(
        provider="github",
        kind=kind,
        repo=repo,
        number=int_of(raw.get("number")),
        url=text_of(raw.get("html_url")),
    )


def _is_repo(repo: str) -> bool:
    owner, _, name = repo.partition("/")
    return bool(owner and name) and quote(owner, safe="-_.") == owner and quote(name, safe="-_.") == name


GITHUB = GitHub()
