"""A generic sender (README's Triggers): any program that POSTs JSON, signed as WorkTrain signs
its own webhooks (README's Webhooks): `X-WorkTrain-Signature: sha256=<hex HMAC-SHA256 of the
raw body>`. The event's name is `X-WorkTrain-Event` (else the body's `event`, else
`generic`); its delivery id `X-WorkTrain-Delivery`, else `Idempotency-Key`, else the body's
digest (the same body twice is one delivery). No item: a `key` template says what a
session is about, else each delivery is its own.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

from daemon.schema.records import TriggerItem
from daemon.schema.webhookpayloads import DELIVERY_HEADER, EVENT_HEADER, SIGNATURE_HEADER, sign
from daemon.triggers.events import BadPayload, Facts, TriggerEvent, dig, text_of
from daemon.triggers.providers.base import Headers, Listing, RateLimit


class Generic:
    name = "generic"

    def verify(self, secret: str, headers: Headers, body: bytes) -> bool:
        given = headers.get(SIGNATURE_HEADER.lower(), "")
        return hmac.compare_digest(given.encode("latin-1", "replace"), sign(secret, body).encode())

    def webhook_event(self, headers: Headers, body: bytes) -> TriggerEvent:
        try:
            payload = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            raise BadPayload("the body is not valid JSON") from None
        if not isinstance(payload, dict):
            raise BadPayload("the body must be a JSON object")
        name = headers.get(EVENT_HEADER.lower()) or text_of(payload.get("event")) or "generic"
        delivery = headers.get(DELIVERY_HEADER.lower()) or headers.get("idempotency-key") or ""
        if not delivery.strip():
            delivery = "sha256-" + hashlib.sha256(body).hexdigest()
        facts = Facts(labels=_labels(payload.get("labels")), author=text_of(dig(payload, "sender")))
        return TriggerEvent(name.strip().lower(), delivery.strip(), payload, "webhook", None, facts)

    def describe(self, event: TriggerEvent) -> str:
        return f"{event.name}: {json.dumps(event.payload, ensure_ascii=False)[:2000]}"

    def comments_url(self, api_url: str, item: TriggerItem) -> str | None:
        return None

    def auth_headers(self, token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    def listing(self, api_url: str, repo: str, kind: str, cursor: str | None, labels: list[str]) -> Listing:
        raise ValueError("a generic trigger is not polled")

    def next_page(self, headers: Headers, url: str) -> str | None:
        return None

    def rate_limit(self, headers: Headers, now_ms: int) -> RateLimit:
        return RateLimit()

    def polled_event(self, kind: str, item: Any, repo: str) -> TriggerEvent | None:
        return None

    def comments_since_url(self, comments_url: str, since: str) -> str:
        return comments_url

    def comment_text(self, comment: Any) -> str:
        return ""


def _labels(labels: Any) -> tuple[str, ...]:
    return tuple(label for label in labels if isinstance(label, str)) if isinstance(labels, list) else ()


GENERIC = Generic()
