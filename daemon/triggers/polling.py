"""One poll of a trigger (README's Triggers): read its listings, return the item versions it has
not handled, the next cursor, the ETags to keep, and any rate-limit pause.

How nothing is fired twice or skipped:
- the cursor is the newest `updated_at` of a poll that read every listing to its end (it
  only moves forward, daemon/bus/lua/trigger_polled.lua); the next poll asks from a minute
  before it (GitHub `since`, GitLab `updated_after`: both inclusive), so an item updated
  while a poll paged, or shown a little late, is in the next one; a poll with an error
  keeps the cursor where it was;
- an item version (`<item>@<updated_at>`) is fired once: `seen` in Redis, and its
  dispatch's Idempotency-Key or its steer's clientMsgId is the version, so two pollers
  overlapping (a frozen holder waking up) still start one session;
- the first page of a listing is asked with `If-None-Match` when its last answer had no
  next page: a 304 means nothing changed since (on GitHub it costs no rate limit).
Rate limits: a request is not made while the budget's remaining share is low (below 2 %,
at least 10) nor before a 403/429's reset or Retry-After; the pause is kept in Redis, so a
poller that takes over keeps it too.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from daemon.bus.fleet.metrics import NULL_RECORDER, TRIGGER_REQUESTS, MetricsRecorder
from daemon.bus.fleet.triggers import PollResult, TriggerState
from daemon.host.clock import epoch_ms
from daemon.triggers.events import TriggerEvent
from daemon.triggers.http import HttpAnswer, HttpFailure, request, same_origin
from daemon.triggers.loading import Trigger
from daemon.triggers.providers import provider
from daemon.triggers.providers.base import Listing, Provider, RateLimit
from daemon.triggers.spec import POLL_EVENTS, as_list

log = logging.getLogger(__name__)

MAX_PAGES = 20  # per listing and poll: 2000 items; the rest comes next poll (the cursor holds)
REQUEST_TIMEOUT_SECONDS = 10.0
LOW_SHARE = 50  # stop while remaining < limit / LOW_SHARE (2 %) ...
LOW_FLOOR = 10  # ... or below this
# A poll asks from this long before the cursor: an item the provider shows a little late, with an
# `updated_at` just before the newest one seen, is still listed (and a version seen is not fired again)
OVERLAP_MS = 60_000

Fetch = Callable[[str, str, dict[str, str], bytes | None, float], HttpAnswer]


def fetch_http(
    method: str, url: str, headers: dict[str, str], body: bytes | None, timeout: float
) -> HttpAnswer:
    return request(method, url, headers, body, timeout)


@dataclass
class PollOutcome:
    result: PollResult
    events: list[TriggerEvent] = field(default_factory=list)  # unhandled versions, oldest first
    cursor: tuple[str, int] | None = None  # advance to this (None: keep)
    etags: dict[str, str] = field(default_factory=dict)
    paused_until_ms: int = 0
    error: str | None = None
    partial: bool = False  # a newest-first listing not read down to the cursor: keep the cursor


class LeaseLost(Exception):
    """The poll lease went to another process mid-poll: stop, it polls now."""


@dataclass
class Poll:
    """One poll's reading of its listings (the state between requests)."""

    trigger: Trigger
    token: str
    state: TriggerState
    renew: Callable[[], bool]  # before each request: still our lease?
    etags: dict[str, str]  # known ETags of first pages
    fetch: Fetch = fetch_http
    metrics: MetricsRecorder = NULL_RECORDER
    outcome: PollOutcome = field(default_factory=lambda: PollOutcome("not_modified"))

    @property
    def provider(self) -> Provider:
        return provider(self.trigger.spec.source)

    def run(self) -> PollOutcome:
        now = epoch_ms()
        if (self.state.pausedUntilMs or 0) > now:
            return PollOutcome("rate_limited", paused_until_ms=self.state.pausedUntilMs or 0)
        spec = self.trigger.spec
        labels = as_list(spec.filter.label) if spec.filter is not None else []
        found: list[TriggerEvent] = []
        for kind in (k for k in spec.events if k in POLL_EVENTS[spec.source]):
            listing = self.provider.listing(
                spec.api_url, spec.repo or "", kind, asked_from(self.state), labels[:1]
            )
            if not self._read(listing, found):
                break
        outcome = self.outcome
        found.sort(key=lambda e: e.version[1] if e.version else 0)
        outcome.events = found
        if outcome.result in ("changed", "not_modified") and found and not outcome.partial:
            newest = found[-1].version
            assert newest is not None
            outcome.cursor = (_cursor_text(found[-1]), newest[1])
        return outcome

    def _read(self, listing: Listing, found: list[TriggerEvent]) -> bool:
        """Read one listing to its end (or the cursor); False: stop the poll (error, limit)."""
        spec = self.trigger.spec
        url, first = listing.url, True
        cursor_ms = max((self.state.cursorMs or 0) - OVERLAP_MS, 0)
        for _ in range(MAX_PAGES):
            answer = self._get(url, self.etags.get(url) if first else None)
            if answer is None:
                return False
            if answer.status == 304:
                return True
            items = _items(answer)
            if items is None:
                return self._failed(f"GET {_path(url)}: the answer is not a JSON list")
            self.outcome.result = "changed"
            older = False
            for item in items:
                event = self.provider.polled_event(listing.kind, item, spec.repo or "")
                if event is None or event.version is None:
                    continue
                if listing.newest_first and event.version[1] < cursor_ms:
                    older = True
                    break
                found.append(event)
            following = self.provider.next_page(answer.headers, url)
            if first:  # an ETag only for a listing whose first page was all of it
                self.outcome.etags[url] = answer.headers.get("etag", "") if following is None else ""
            if following is None or older:
                return not self.outcome.paused_until_ms
            if self.outcome.paused_until_ms:
                self.outcome.partial = listing.newest_first
                return False
            if not same_origin(following, spec.api_url):
                return self._failed(f"the next page is not on {spec.api_url}: not followed")
            url, first = following, False
        self.outcome.partial = self.outcome.partial or listing.newest_first
        return True

    def _get(self, url: str, etag: str | None) -> HttpAnswer | None:
        if not self.renew():
            raise LeaseLost(self.trigger.id)
        headers = self.provider.auth_headers(self.token)
        if etag:
            headers["If-None-Match"] = etag
        try:
            answer = self.fetch("GET", url, headers, None, REQUEST_TIMEOUT_SECONDS)
        except HttpFailure as exc:
            self.metrics.count(TRIGGER_REQUESTS, trigger=self.trigger.id, status="error")
            self._failed(f"GET {_path(url)}: {exc}")
            return None
        self.metrics.count(TRIGGER_REQUESTS, trigger=self.trigger.id, status=_status_class(answer.status))
        limit = self.provider.rate_limit(answer.headers, epoch_ms())
        if answer.status in (403, 429) and (limit.remaining == 0 or limit.retry_after_ms is not None):
            self._pause(limit, f"GET {_path(url)}: {answer.status}, rate limited")
            return None
        if answer.status not in (200, 304):
            self._failed(f"GET {_path(url)}: HTTP {answer.status}: {_excerpt(answer.body)}")
            return None
        if limit.remaining is not None and limit.remaining < max(LOW_FLOOR, (limit.limit or 0) // LOW_SHARE):
            self._pause(limit, None)  # this answer counts; no further request until the reset
        return answer

    def _pause(self, limit: RateLimit, sentence: str | None) -> None:
        fallback = epoch_ms() + self.trigger.spec.interval * 1000
        until = max(limit.retry_after_ms or 0, limit.reset_ms or 0) or fallback
        self.outcome.paused_until_ms = until
        if sentence is not None:
            self.outcome.result = "rate_limited"
            self.outcome.error = sentence
        log.warning("trigger %s: rate limit low; no request until %d ms", self.trigger.id, until)

    def _failed(self, sentence: str) -> bool:
        self.outcome.result = "error"
        self.outcome.error = sentence[:500]
        return False


def asked_from(state: TriggerState) -> str | None:
    """What a poll asks from (`since`, `updated_after`): the cursor less OVERLAP_MS, in UTC."""
    if not state.cursorMs:
        return None
    moment = datetime.fromtimestamp((state.cursorMs - OVERLAP_MS) / 1000, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _items(answer: HttpAnswer) -> list[object] | None:
    try:
        items = json.loads(answer.body)
    except (ValueError, UnicodeDecodeError):
        return None
    return items if isinstance(items, list) else None


def _cursor_text(event: TriggerEvent) -> str:
    assert event.version is not None
    return event.version[0].rsplit("@", 1)[1]


def _status_class(status: int) -> str:
    return str(status) if status in (200, 304) else f"{status // 100}xx"


def _path(url: str) -> str:
    return url.split("?", 1)[0][-200:]


def _excerpt(body: bytes) -> str:
    return body[:200].decode(errors="replace").replace("\n", " ")
