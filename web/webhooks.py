"""Webhook delivery routes (README's Webhooks): what was sent where, and what was given up.

`GET /api/v2/sessions/<id>/webhooks` (the console's card on a session's page) and
`GET /api/v2/webhooks?failed=&limit=` (`worktrain webhooks [--failed]`). Read-only: the
deliveries are queued by the workers' emit.lua and sent by their senders.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from flask import Response, request

from daemon.bus.outbox.webhooks import WebhookOutbox
from daemon.bus.session.registry import record_exists
from daemon.bus.session.steerbus import SteerBus
from web.errors import json_response, session_not_found
from web.models import WebhooksQuery, parse_query
from web.requestbasics import require_session_id


@dataclass
class WebhookRoutes:
    bus: SteerBus
    outbox: WebhookOutbox = field(init=False)

    def __post_init__(self) -> None:
        self.outbox = WebhookOutbox(self.bus.client, self.bus.keys)

    def session_webhooks(self, session_id: str) -> Response:
        require_session_id(session_id)
        if not record_exists(self.bus.client, self.bus.keys, session_id):
            raise session_not_found()
        deliveries = [d.view().model_dump(mode="json") for d in self.outbox.of_session(session_id)]
        return json_response({"success": True, "data": {"sessionId": session_id, "deliveries": deliveries}})

    def webhooks(self) -> Response:
        query = parse_query(WebhooksQuery, request.args)
        deliveries = [d.view().model_dump(mode="json") for d in self.outbox.recent(query.limit, query.failed)]
        data = {"deliveries": deliveries, "pending": self.outbox.pending_count()}
        return json_response({"success": True, "data": data})
