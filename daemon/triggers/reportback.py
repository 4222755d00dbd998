"""Report back (README's Triggers): a finished session's outcome, branch and final notes as one
comment on its issue, pull request or merge request.

The comment travels as a `trigger.comment` delivery of the webhook outbox (daemon/bus/
webhooks.py): queued by emit.lua with `session_completed` (so it exists exactly when the
session ended), taken by any worker's sender, tried again on a non-2xx, a timeout or a
refused connection, given up after 24 h. `CommentPoster` makes each try. Never twice: the
comment carries a hidden line naming its delivery (`<!-- worktrain: whd_... -->`), and
every try first lists the item's recent comments: one with that line means an earlier try
was posted after all (its answer lost, a 500 after the write, a sender killed mid-try), and
the delivery is done. The token is read from the trigger's `tokenEnv` at each try, in the
sending process, and goes only to the trigger's `apiUrl`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from daemon.bus.fleet.triggers import TriggerStore
from daemon.bus.outbox.webhooks import WebhookDelivery
from daemon.bus.session.registry import SessionRegistry
from daemon.schema.records import SessionRecord
from daemon.schema.webhookpayloads import CommentJob
from daemon.triggers.events import OWN_MARK
from daemon.triggers.http import HttpFailure, request, same_origin
from daemon.triggers.loading import TriggerSet
from daemon.triggers.providers import provider
from daemon.webhooks.sender import TryOutcome

log = logging.getLogger(__name__)

NOTES_CHARS = 6000  # a comment quotes at most this much of the final notes
LOOK_BACK = timedelta(hours=1)  # comments listed from this long before the delivery was queued
LIST_PAGES = 5


def marker(delivery_id: str) -> str:
    return f"{OWN_MARK}: {delivery_id} -->"


def comment_text(record: SessionRecord | None, session_id: str, notes: str | None, delivery_id: str) -> str:
    """The comment: who ended how, on which branch, and what the agent said last. Pure."""
    if record is None:
        lines = [f"**WorkTrain session `{session_id}` has ended** (its record has expired)."]
    else:
        outcome = f", outcome `{record.outcome}`" if record.outcome else ""
        lines = [f"**WorkTrain session `{session_id}` {record.status.value}**{outcome}."]
        if record.outcomeDetail:
            lines.append(record.outcomeDetail)
        branch = record.delivery.branch if record.delivery is not None else record.branch
        if branch:
            said = f"Branch: `{branch}`"
            if record.delivery is not None:
                pushed = ", pushed" if record.delivery.pushed else ""
                said += f" ({record.delivery.commits} commit(s){pushed}, {record.delivery.state})"
            lines.append(said + ".")
    if notes:
        quoted = notes if len(notes) <= NOTES_CHARS else notes[: NOTES_CHARS - 1] + "…"
        lines.append("Final notes:\n\n" + "\n".join(f"> {line}" for line in quoted.splitlines()))
    lines.append(marker(delivery_id))
    return "\n\n".join(lines)


class CommentPoster:
    """The sender's poster of `trigger.comment` deliveries (daemon/webhooks/sender.py)."""

    def __init__(
        self,
        triggers: TriggerSet,
        store: TriggerStore,
        registry: SessionRegistry,
        secret: Callable[[str], str | None],
    ) -> None:
        self.triggers = triggers
        self.store = store
        self.registry = registry
        self.secret = secret

    def __call__(self, delivery: WebhookDelivery, timeout: float) -> TryOutcome:
        job = CommentJob.model_validate_json(delivery.body)
        trigger_id = json.loads(job.trigger).get("triggerId", "")
        trigger = self.triggers.get(trigger_id)
        if trigger is None:
            return TryOutcome(None, f"trigger {trigger_id!r} is not in this worker's triggers file", None)
        spec = trigger.spec
        token = self.secret(spec.tokenEnv) if spec.tokenEnv else None
        if not token:
            return TryOutcome(None, f"the variable {spec.tokenEnv} is not set in this worker", None)
        if not same_origin(job.commentsUrl, spec.api_url):
            return TryOutcome(None, f"the comments URL is not on {spec.api_url}: not sent", None)
        source = provider(spec.source)
        headers = source.auth_headers(token)
        try:
            if self._posted_before(delivery, job, spec.source, headers, timeout):
                return TryOutcome(200, None, "posted by an earlier try")
            record = self.registry.get(job.sessionId)
            text = comment_text(record, job.sessionId, self.store.final_notes(job.sessionId), delivery.id)
            body = json.dumps({"body": text}).encode()
            answer = request("POST", job.commentsUrl, headers, body, timeout)
        except HttpFailure as exc:
            return TryOutcome(None, str(exc), None)
        return TryOutcome(answer.status, None, answer.body[:512].decode(errors="replace") or None)

    def _posted_before(
        self,
        delivery: WebhookDelivery,
        job: CommentJob,
        source_name: str,
        headers: dict[str, str],
        timeout: float,
    ) -> bool:
        """Whether a comment with this delivery's line is on the item (its recent comments, a
        few pages at most); HttpFailure when they cannot be read (the try is retried)."""
        source = provider(source_name)
        since = datetime.fromtimestamp(delivery.createdMs / 1000, UTC) - LOOK_BACK
        url: str | None = source.comments_since_url(job.commentsUrl, since.strftime("%Y-%m-%dT%H:%M:%SZ"))
        mark = marker(delivery.id)
        for _ in range(LIST_PAGES):
            if url is None or not same_origin(url, job.commentsUrl):
                return False
            answer = request("GET", url, headers, None, timeout)
            if answer.status != 200:
                raise HttpFailure(f"listing the comments: HTTP {answer.status}")
            try:
                comments = json.loads(answer.body)
            except ValueError:
                raise HttpFailure("listing the comments: not JSON") from None
            if not isinstance(comments, list):
                raise HttpFailure("listing the comments: not a list")
            if any(mark in source.comment_text(comment) for comment in comments):
                return True
            url = source.next_page(answer.headers, url)
        return False
