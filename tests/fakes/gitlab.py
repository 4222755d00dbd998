"""A loopback fake of GitLab's REST API (v4) and webhooks, as docs.gitlab.com gives them.

REST: `GET /api/v4/projects/{id or url-encoded path}/merge_requests` and `/issues`
(`state=opened`, `labels`, `updated_after` — on or after —, `order_by=updated_at`,
`sort`, `per_page` ≤ 100 default 20, `page`), paged with `X-Page`, `X-Per-Page`,
`X-Next-Page`, `X-Prev-Page`, `X-Total`, `X-Total-Pages` and `Link`;
`GET|POST .../merge_requests/{iid}/notes` and `.../issues/{iid}/notes` (POST `{"body"}` →
201). Timestamps with milliseconds (`2025-03-01T09:00:01.000Z`). Every answer carries
`RateLimit-Limit/-Observed/-Remaining/-Reset/-ResetTime`; an exhausted budget → 429 with
`Retry-After`. The token goes in `PRIVATE-TOKEN` (401 `{"message": "401 Unauthorized"}`).
Webhooks: `deliver` POSTs as GitLab does (`X-Gitlab-Event: Merge Request Hook`,
`X-Gitlab-Token`, `X-Gitlab-Event-UUID`, `X-Gitlab-Webhook-UUID`, `Idempotency-Key`, the
same on a retry); payloads `object_kind` + `object_attributes` (with `action`).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from email.utils import formatdate
from typing import Any
from urllib.parse import unquote

from tests.fakes.common import (
    Answer,
    Budget,
    FakeService,
    Request,
    etag_of,
    link_header,
    page_of,
    parse_stamp,
    stamp,
)

TOKEN = "glpat-fake0123456789abcdef"


@dataclass
class Item:
    iid: int
    title: str
    author: str
    labels: list[str]
    created: str
    updated: str
    kind: str  # merge_request | issue
    state: str = "opened"
    notes: list[dict[str, Any]] = field(default_factory=list)


class FakeGitLab(FakeService):
    def __init__(self, project: str = "acme/app", project_id: int = 77, token: str = TOKEN) -> None:
        self.project = project
        self.project_id = project_id
        self.token = token
        self.items: dict[tuple[str, int], Item] = {}
        self.budget = Budget(limit=2000, window_seconds=60)
        self.next_id = 3000
        super().__init__()

    def open(self, kind: str, title: str, labels: list[str] | None = None, author: str = "alice") -> Item:
        with self.lock:
            now = stamp(self.clock.tick(), millis=True)
            iid = 1 + sum(1 for k, _ in self.items if k == kind)
            item = Item(iid, title, author, list(labels or []), now, now, kind)
            self.items[(kind, iid)] = item
            return item

    def note(self, kind: str, iid: int, body: str, author: str = "bob") -> dict[str, Any]:
        with self.lock:
            item = self.items[(kind, iid)]
            now = stamp(self.clock.tick(), millis=True)
            self.next_id += 1
            note = {
                "id": self.next_id, "body": body, "author": {"id": 7, "username": author, "name": author},
                "created_at": now, "updated_at": now, "system": False,
                "noteable_type": "MergeRequest" if kind == "merge_request" else "Issue", "noteable_iid": iid,
            }  # fmt: skip
            item.notes.append(note)
            item.updated = now
            return note

    def item_json(self, item: Item) -> dict[str, Any]:
        path = "merge_requests" if item.kind == "merge_request" else "issues"
        data = {
            "id": 90000 + item.iid, "iid": item.iid, "project_id": self.project_id, "title": item.title,
            "description": f"Description of {item.title}", "state": item.state,
            "created_at": item.created, "updated_at": item.updated, "labels": list(item.labels),
            "author": {"id": 1, "username": item.author, "name": item.author},
            "web_url": f"https://gitlab.example/{self.project}/-/{path}/{item.iid}",
        }  # fmt: skip
        if item.kind == "merge_request":
            data.update({"source_branch": f"feature-{item.iid}", "target_branch": "main", "draft": False})
        return data

    # --- webhooks ----------------------------------------------------------------------------

    def hook(self, item: Item, action: str, actor: str = "alice") -> dict[str, Any]:
        attributes = {**self.item_json(item), "action": action, "url": self.item_json(item)["web_url"]}
        return {
            "object_kind": item.kind, "event_type": item.kind,
            "user": {"id": 1, "name": actor, "username": actor},
            "project": {"id": self.project_id, "path_with_namespace": self.project, "web_url": "https://gitlab.example"},
            "object_attributes": attributes,
            "labels": [{"id": 5, "title": name} for name in item.labels],
        }  # fmt: skip

    def note_hook(self, item: Item, note: dict[str, Any]) -> dict[str, Any]:
        attributes = {"id": note["id"], "note": note["body"], "noteable_type": note["noteable_type"],
                      "action": "create", "created_at": note["created_at"], "system": False}  # fmt: skip
        about = {"merge_request" if item.kind == "merge_request" else "issue": self.item_json(item)}
        return {
            "object_kind": "note", "event_type": "note",
            "user": {"id": 7, "name": note["author"]["username"], "username": note["author"]["username"]},
            "project": {"id": self.project_id, "path_with_namespace": self.project},
            "object_attributes": attributes, **about,
        }  # fmt: skip

    # --- the HTTP side -------------------------------------------------------------------------

    def route(self, request: Request) -> Answer:
        if request.headers.get("private-token") != self.token:
            return Answer(401, {"message": "401 Unauthorized"})
        prefix = "/api/v4/projects/"
        if not request.path.startswith(prefix):
            return Answer(404, {"message": "404 Not Found"})
        project, _, rest = request.path[len(prefix) :].partition("/")
        if unquote(project) not in (self.project, str(self.project_id)):
            return Answer(404, {"message": "404 Project Not Found"})
        parts = rest.split("/")
        kind = {"merge_requests": "merge_request", "issues": "issue"}.get(parts[0])
        if kind is None:
            return Answer(404, {"message": "404 Not Found"})
        if len(parts) == 1 and request.method == "GET":
            return self._listed(request, self._list(kind, request.query), self.item_json)
        if len(parts) == 3 and parts[2] == "notes" and (kind, int(parts[1])) in self.items:
            if request.method == "POST":
                if not self.budget.spend():
                    return self._limited()
                body = request.json()
                note = self.note(kind, int(parts[1]), body["body"], author="worktrain-bot")
                return Answer(201, note, self._limit_headers())
            notes = list(reversed(self.items[(kind, int(parts[1]))].notes))
            return self._listed(request, notes, lambda n: n)
        return Answer(404, {"message": "404 Not Found"})

    def _list(self, kind: str, query: dict[str, str]) -> list[Item]:
        with self.lock:
            items = [
                i
                for i in self.items.values()
                if i.kind == kind and query.get("state", "all") in ("all", i.state)
            ]
        wanted = [name for name in (query.get("labels") or "").split(",") if name]
        items = [i for i in items if all(name in i.labels for name in wanted)]
        if query.get("updated_after"):
            after = parse_stamp(query["updated_after"])
            items = [i for i in items if parse_stamp(i.updated) >= after]
        items.sort(key=lambda i: (i.updated, i.iid), reverse=query.get("sort", "desc") == "desc")
        return items

    def _listed(self, request: Request, items: list[Any], shape: Any) -> Answer:
        chunk, page, pages = page_of(items, request.query, default=20)
        body = [shape(i) for i in chunk]
        etag = etag_of(body)
        if request.headers.get("if-none-match") == etag:
            return Answer(304, None, {"ETag": etag})
        if not self.budget.spend():
            return self._limited()
        headers = {
            "ETag": etag, "X-Page": str(page), "X-Per-Page": str(len(chunk) or 20),
            "X-Total": str(len(items)),
            "X-Total-Pages": str(pages), "X-Next-Page": str(page + 1) if page < pages else "",
            "X-Prev-Page": str(page - 1) if page > 1 else "", **self._limit_headers(),
        }  # fmt: skip
        link = link_header(request, page, pages)
        if link:
            headers["Link"] = link
        return Answer(200, body, headers)

    def _limit_headers(self) -> dict[str, str]:
        b = self.budget
        return {
            "RateLimit-Limit": str(b.limit), "RateLimit-Observed": str(b.limit - b.remaining),
            "RateLimit-Remaining": str(b.remaining), "RateLimit-Reset": str(b.reset),
            "RateLimit-ResetTime": formatdate(b.reset, usegmt=True),
        }  # fmt: skip

    def _limited(self) -> Answer:
        return Answer(429, {"message": "Retry later"}, {"Retry-After": "60", **self._limit_headers()})


@dataclass
class Delivered:
    status: int
    body: dict[str, Any]
    delivery: str


EVENT_HEADERS = {"merge_request": "Merge Request Hook", "issue": "Issue Hook", "note": "Note Hook"}


def deliver(url: str, payload: dict[str, Any], token: str | None, delivery: str | None = None) -> Delivered:
    """POST a webhook as GitLab sends it (`delivery`: the Idempotency-Key, kept on a retry)."""
    body = json.dumps(payload).encode()
    delivery = delivery or str(uuid.uuid4())
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "GitLab/17.5.0",
        "X-Gitlab-Event": EVENT_HEADERS.get(payload["object_kind"], "System Hook"),
        "X-Gitlab-Event-UUID": str(uuid.uuid4()),
        "X-Gitlab-Webhook-UUID": "a7c0c53e-0000-4000-8000-000000000001",
        "X-Gitlab-Instance": "https://gitlab.example",
        "Idempotency-Key": delivery,
    }
    if token is not None:
        headers["X-Gitlab-Token"] = token
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return Delivered(response.status, json.loads(response.read() or b"{}"), delivery)
    except urllib.error.HTTPError as error:
        return Delivered(error.code, json.loads(error.read() or b"{}"), delivery)
