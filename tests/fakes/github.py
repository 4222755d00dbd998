"""A loopback fake of GitHub's REST API and webhooks, as docs.github.com gives them.

REST (the parts triggers use):
- `GET /repos/{owner}/{repo}/issues` (`state`, `labels` — all of them —, `sort`, `direction`,
  `since` — updated at or after —, `per_page` ≤ 100 default 30, `page`): issues AND pull
  requests (those carry a `pull_request` key), `Link` rel next/last/first/prev;
- `GET /repos/{owner}/{repo}/pulls` (`state`, `sort=updated`, `direction`, paging; no `since`);
- `GET|POST /repos/{owner}/{repo}/issues/{number}/comments` (`since`, paging; POST `{"body"}`
  → 201 with the comment);
- every GET answers a weak `ETag`; `If-None-Match` with it → 304 without a body, which costs
  no rate limit; every answer carries `X-RateLimit-Limit/-Remaining/-Used/-Reset/-Resource`;
  an exhausted budget → 403 `API rate limit exceeded`; `Authorization: Bearer <token>` must
  be the fake's token (401 `Bad credentials`).
Webhooks: `deliver(url, event, payload, secret)` POSTs as GitHub does (`X-GitHub-Event`,
`X-GitHub-Delivery` GUID, `X-GitHub-Hook-ID`, `X-Hub-Signature-256`, `X-Hub-Signature`,
`User-Agent: GitHub-Hookshot/…`), and the payload builders give `issues.labeled`,
`issue_comment.created`, `pull_request.opened` and `ping` in GitHub's shape.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from typing import Any

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

TOKEN = "ghp_faketoken0123456789abcdefABCDEF0123"


def user(login: str, user_id: int = 1) -> dict[str, Any]:
    return {"login": login, "id": user_id, "type": "Bot" if login.endswith("[bot]") else "User"}


@dataclass
class Item:
    """An issue or a pull request (GitHub numbers both in one sequence)."""

    number: int
    title: str
    body: str
    author: str
    labels: list[str]
    created: str
    updated: str
    pull: bool = False
    state: str = "open"
    comments: list[dict[str, Any]] = field(default_factory=list)


class FakeGitHub(FakeService):
    def __init__(self, repo: str = "acme/app", token: str = TOKEN) -> None:
        self.repo = repo
        self.token = token
        self.items: dict[int, Item] = {}
        self.budget = Budget()
        self.next_id = 1000
        super().__init__()

    # --- the world changing ----------------------------------------------------------------

    def open_issue(
        self, title: str, labels: list[str] | None = None, author: str = "alice", pull: bool = False
    ) -> Item:
        with self.lock:
            now = stamp(self.clock.tick())
            number = len(self.items) + 1
            item = Item(number, title, f"Body of {title}", author, list(labels or []), now, now, pull)
            self.items[number] = item
            return item

    def label(self, number: int, name: str) -> Item:
        with self.lock:
            item = self.items[number]
            item.labels.append(name)
            item.updated = stamp(self.clock.tick())
            return item

    def comment(self, number: int, body: str, author: str = "bob") -> dict[str, Any]:
        with self.lock:
            item = self.items[number]
            now = stamp(self.clock.tick())
            self.next_id += 1
            comment = {
                "id": self.next_id,
                "node_id": f"IC_{self.next_id}",
                "body": body,
                "user": user(author, 7),
                "created_at": now,
                "updated_at": now,
                "html_url": f"https://github.com/{self.repo}/issues/{number}#issuecomment-{self.next_id}",
                "issue_url": f"{self.url}/repos/{self.repo}/issues/{number}",
                "author_association": "MEMBER",
            }
            item.comments.append(comment)
            item.updated = now
            return comment

    def comments_on(self, number: int) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.items[number].comments)

    # --- JSON as the API gives it ------------------------------------------------------------

    def issue_json(self, item: Item) -> dict[str, Any]:
        api = f"{self.url}/repos/{self.repo}/issues/{item.number}"
        data: dict[str, Any] = {
            "id": 500000 + item.number,
            "node_id": f"I_{item.number}",
            "url": api,
            "repository_url": f"{self.url}/repos/{self.repo}",
            "comments_url": f"{api}/comments",
            "html_url": f"https://github.com/{self.repo}/{'pull' if item.pull else 'issues'}/{item.number}",
            "number": item.number,
            "state": item.state,
            "title": item.title,
            "body": item.body,
            "user": user(item.author),
            "labels": [{"id": 90 + i, "name": name, "color": "ededed"} for i, name in enumerate(item.labels)],
            "comments": len(item.comments),
            "created_at": item.created,
            "updated_at": item.updated,
            "closed_at": None,
            "author_association": "MEMBER",
        }
        if item.pull:
            data["pull_request"] = {
                "url": f"{self.url}/repos/{self.repo}/pulls/{item.number}",
                "html_url": f"https://github.com/{self.repo}/pull/{item.number}",
            }
        return data

    def pull_json(self, item: Item) -> dict[str, Any]:
        data = self.issue_json(item)
        data.pop("pull_request", None)
        data.update(
            {
                "url": f"{self.url}/repos/{self.repo}/pulls/{item.number}",
                "html_url": f"https://github.com/{self.repo}/pull/{item.number}",
                "draft": False,
                "head": {
                    "ref": f"feature-{item.number}",
                    "sha": hashlib.sha1(item.title.encode()).hexdigest(),
                },
                "base": {"ref": "main", "sha": "0" * 40},
            }
        )
        return data

    def repository_json(self) -> dict[str, Any]:
        owner, name = self.repo.split("/")
        return {"id": 4242, "name": name, "full_name": self.repo, "owner": user(owner, 2), "private": False}

    # --- webhooks ----------------------------------------------------------------------------

    def issues_labeled(self, item: Item, label: str, sender: str = "alice") -> dict[str, Any]:
        return {
            "action": "labeled",
            "issue": self.issue_json(item),
            "label": {"id": 91, "name": label, "color": "ededed"},
            "repository": self.repository_json(),
            "sender": user(sender),
        }

    def issue_comment_created(self, item: Item, comment: dict[str, Any]) -> dict[str, Any]:
        return {
            "action": "created",
            "issue": self.issue_json(item),
            "comment": comment,
            "repository": self.repository_json(),
            "sender": comment["user"],
        }

    def pull_request_opened(self, item: Item) -> dict[str, Any]:
        return {
            "action": "opened",
            "number": item.number,
            "pull_request": self.pull_json(item),
            "repository": self.repository_json(),
            "sender": user(item.author),
        }

    @staticmethod
    def ping(hook_id: int = 123) -> dict[str, Any]:
        return {
            "zen": "Keep it logically awesome.",
            "hook_id": hook_id,
            "hook": {
                "type": "Repository",
                "id": hook_id,
                "active": True,
                "events": ["issues", "issue_comment"],
            },
        }

    # --- the HTTP side -------------------------------------------------------------------------

    def route(self, request: Request) -> Answer:
        if request.headers.get("authorization") != f"Bearer {self.token}":
            return Answer(
                401, {"message": "Bad credentials", "documentation_url": "https://docs.github.com/rest"}
            )
        base = f"/repos/{self.repo}"
        if request.method == "GET" and request.path == f"{base}/issues":
            return self._listed(request, self._issues(request.query), self.issue_json)
        if request.method == "GET" and request.path == f"{base}/pulls":
            pulls = [i for i in self.items.values() if i.pull and i.state == "open"]
            pulls.sort(key=lambda i: i.updated, reverse=request.query.get("direction", "desc") == "desc")
            return self._listed(request, pulls, self.pull_json)
        prefix = f"{base}/issues/"
        if request.path.startswith(prefix) and request.path.endswith("/comments"):
            number = int(request.path[len(prefix) : -len("/comments")])
            if number not in self.items:
                return Answer(404, {"message": "Not Found"})
            if request.method == "POST":
                return self._post_comment(request, number)
            since = request.query.get("since")
            found = [c for c in self.comments_on(number) if since is None or c["updated_at"] >= since]
            return self._listed(request, found, lambda c: c)
        return Answer(404, {"message": "Not Found"})

    def _issues(self, query: dict[str, str]) -> list[Item]:
        with self.lock:
            items = [i for i in self.items.values() if query.get("state", "open") in ("all", i.state)]
        wanted = [name for name in (query.get("labels") or "").split(",") if name]
        items = [i for i in items if all(name in i.labels for name in wanted)]
        if query.get("since"):
            since = parse_stamp(query["since"])
            items = [i for i in items if parse_stamp(i.updated) >= since]
        key = "updated" if query.get("sort") == "updated" else "created"
        items.sort(
            key=lambda i: (getattr(i, key), i.number), reverse=query.get("direction", "desc") == "desc"
        )
        return items

    def _listed(self, request: Request, items: list[Any], shape: Any) -> Answer:
        chunk, page, pages = page_of(items, request.query)
        body = [shape(i) for i in chunk]
        etag = etag_of(body)
        if request.headers.get("if-none-match") == etag:
            return Answer(304, None, {"ETag": etag, **self._limit_headers()})
        if not self.budget.spend():
            return self._limited()
        headers = {"ETag": etag, **self._limit_headers()}
        link = link_header(request, page, pages)
        if link:
            headers["Link"] = link
        return Answer(200, body, headers)

    def _post_comment(self, request: Request, number: int) -> Answer:
        if not self.budget.spend():
            return self._limited()
        body = request.json()
        if not isinstance(body, dict) or not isinstance(body.get("body"), str):
            return Answer(422, {"message": "Validation Failed"})
        return Answer(
            201, self.comment(number, body["body"], author="worktrain-bot[bot]"), self._limit_headers()
        )

    def _limit_headers(self) -> dict[str, str]:
        b = self.budget
        return {
            "X-RateLimit-Limit": str(b.limit),
            "X-RateLimit-Remaining": str(b.remaining),
            "X-RateLimit-Used": str(b.limit - b.remaining),
            "X-RateLimit-Reset": str(b.reset),
            "X-RateLimit-Resource": "core",
        }

    def _limited(self) -> Answer:
        return Answer(403, {"message": "API rate limit exceeded for user ID 1."}, self._limit_headers())

    def polls(self) -> list[Any]:
        return [r for r in self.requests("GET") if r.path.endswith(("/issues", "/pulls"))]


def sign(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


@dataclass
class Delivered:
    status: int
    body: dict[str, Any]
    delivery: str


def deliver(
    url: str,
    event: str,
    payload: dict[str, Any] | bytes,
    secret: str | None,
    delivery: str | None = None,
    signature: str | None = None,
    content_type: str = "application/json",
) -> Delivered:
    """POST a webhook as GitHub sends it; `signature` overrides the computed one."""
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    delivery = delivery or str(uuid.uuid4())
    headers = {
        "Content-Type": content_type,
        "User-Agent": "GitHub-Hookshot/2b4d6f8",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery,
        "X-GitHub-Hook-ID": "123",
        "X-GitHub-Hook-Installation-Target-ID": "4242",
        "X-GitHub-Hook-Installation-Target-Type": "repository",
    }
    if secret is not None:
        headers["X-Hub-Signature"] = "sha1=" + hmac.new(secret.encode(), body, hashlib.sha1).hexdigest()
        headers["X-Hub-Signature-256"] = sign(secret, body)
    if signature is not None:
        headers["X-Hub-Signature-256"] = signature
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return Delivered(response.status, json.loads(response.read() or b"{}"), delivery)
    except urllib.error.HTTPError as error:
        return Delivered(error.code, json.loads(error.read() or b"{}"), delivery)
