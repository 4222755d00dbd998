"""Steer management routes (README's Managing steers): one steer, a receipt to wait on, retract, edit.

- `GET /api/v2/sessions/<id>/steers/<offset>` (and `GET .../steers?clientMsgId=C`): the
  steer folded from the journal; `?wait=S` (S capped at 60) holds the answer until it is no
  longer `pending` or S seconds pass (daemon/bus/session/receipts.py: XREAD BLOCK on the session's
  journal, one Redis connection at a time per waiting request). A wait holds a server
  thread, so at most `max_waits` run at once per process; one more answers 503
  `too_many_waits` with Retry-After.
- `DELETE .../steers/<offset>`: retract a pending steer (retract.lua, atomic with the
  drain); a retry after success answers 200 again. `PATCH .../steers/<offset>` `{"text"}`:
  edit it in place (edit.lua). Once a drain has taken the steer: 409 `steer_taken` (an
  edit of a retracted steer: 409 `steer_retracted`), with its `state`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from flask import Response, request

from daemon.bus.fleet.metrics import NULL_RECORDER, STEERS, MetricsRecorder
from daemon.bus.session.receipts import SessionMissing, SteerReceipts
from daemon.bus.session.registry import record_exists
from daemon.bus.session.steerbus import ChangeResult, SteerBus, SteerChange
from daemon.bus.streams.mirror import EventMirror
from daemon.schema.events import EventBase, SteerEdited, SteerRetracted
from daemon.schema.records import SteerView
from web.errors import ApiError, json_response, session_not_found
from web.finished import gone, refuse_if_finished
from web.models import SteerQuery, parse_edit, parse_query
from web.requestbasics import json_body, require_session_id, too_many_waits
from web.steerchecks import SteerLimits
from web.threadbudget import Slots, ThreadBudget

MAX_RECEIPT_WAITS = 4  # per web process: half of granian's 8 threads a worker (web/serve.py)


def steer_not_found() -> ApiError:
    return ApiError(404, "steer_not_found", "No steer with that offset (or clientMsgId) in this session.")


def steer_body(view: SteerView) -> dict[str, Any]:
    return view.model_dump(mode="json")


TAKEN = {
    "pending": "The steer was already taken by a turn end: the next model call carries it as it was.",
    "delivered": "The steer was already delivered as it was.",
    "undelivered": "The session ended before the steer was delivered; it is journalled undelivered.",
}


def taken(view: SteerView) -> ApiError:
    """409 `steer_taken`: no longer pending (README's Managing steers), with the state it is in."""
    return ApiError(409, "steer_taken", TAKEN.get(view.state, TAKEN["pending"]), {"state": view.state})


@dataclass
class SteerManagementRoutes:
    bus: SteerBus
    mirror: EventMirror | None = None
    max_waits: int = MAX_RECEIPT_WAITS
    limits: SteerLimits = field(default_factory=SteerLimits)  # create_app passes the settings'
    monotonic: Callable[[], float] = time.monotonic
    budget: ThreadBudget | None = None  # shared with streams and bodies (web/threadbudget.py)
    metrics: MetricsRecorder = NULL_RECORDER  # steers retracted and edited (docs/operations.md)
    receipts: SteerReceipts = field(init=False)
    _waits: Slots = field(init=False)

    def __post_init__(self) -> None:
        self.receipts = SteerReceipts(self.bus)
        own = threading.BoundedSemaphore(self.max_waits)
        self._waits = self.budget.holder(self.max_waits) if self.budget is not None else own

    def one(self, session_id: str, offset: int) -> Response:
        view = self._read(require_session_id(session_id), offset, parse_query(SteerQuery, request.args).wait)
        return json_response({"success": True, "data": steer_body(view)})

    def by_client_msg_id(self, session_id: str, client_msg_id: str) -> Response:
        """`GET .../steers?clientMsgId=C`: the steer first accepted with that key."""
        offset = self.receipts.offset_of(require_session_id(session_id), client_msg_id)
        if offset is None:
            self._session_exists(session_id)
            refuse_if_finished(self.bus, session_id)
            raise steer_not_found()
        return self.one(session_id, offset)

    def _read(self, session_id: str, offset: int, wait: float | None) -> SteerView:
        try:
            if not wait:
                view = self.receipts.steer(session_id, offset)
            elif not self._waits.acquire(blocking=False):
                raise too_many_waits()
            else:
                try:
                    view = self.receipts.wait(session_id, offset, wait, self.monotonic)
                finally:
                    self._waits.release()
        except SessionMissing:
            raise session_not_found() from None
        if view is None:
            refuse_if_finished(self.bus, session_id)
            raise steer_not_found()
        return view

    def _session_exists(self, session_id: str) -> None:
        if not record_exists(self.bus.client, self.bus.keys, session_id):
            raise session_not_found()

    def retract(self, session_id: str, offset: int) -> Response:
        result = self.bus.retract(require_session_id(session_id), offset)
        if result.change is SteerChange.RETRACTED:
            self.metrics.count(STEERS, outcome="retracted")
            self._mirror(SteerRetracted(sessionId=session_id, offset=offset, ts=result.at or ""))
        else:
            view = self._settled_as(session_id, result, offset)
            if view.state != "retracted":  # a retracted one: a retry of a DELETE that worked
                refuse_if_finished(self.bus, session_id, view.state)
                raise taken(view)
        return self._changed("retracted", session_id, offset)

    def edit(self, session_id: str, offset: int) -> Response:
        require_session_id(session_id)
        text = parse_edit(json_body()).text
        self.limits.check_text(text)
        result = self.bus.edit(session_id, offset, text, self.limits.max_edits)
        if result.change is SteerChange.TOO_MANY_EDITS:
            raise ApiError(
                409,
                "too_many_edits",
                f"This steer was edited {self.limits.max_edits} times already "
                "(WORKTRAIN_MAX_STEER_EDITS); retract it and send a new one.",
            )
        if result.change is SteerChange.EDITED:
            if result.previous_text != text:
                self.metrics.count(STEERS, outcome="edited")
                self._mirror(SteerEdited(sessionId=session_id, offset=offset, ts=result.at or ""))
            return self._changed("edited", session_id, offset)
        view = self._settled_as(session_id, result, offset)
        refuse_if_finished(self.bus, session_id, view.state)
        if view.state == "retracted":
            raise ApiError(409, "steer_retracted", "The steer was retracted; there is nothing to edit.")
        raise taken(view)

    def _settled_as(self, session_id: str, result: ChangeResult, offset: int) -> SteerView:
        """The steer a change found not pending (or missing: 404)."""
        if result.change is SteerChange.NOT_FOUND:
            raise gone(self.bus, session_id)
        if result.change is SteerChange.STEER_NOT_FOUND:
            refuse_if_finished(self.bus, session_id)
            raise steer_not_found()
        return self._read(session_id, offset, None)

    def _changed(self, status: str, session_id: str, offset: int) -> Response:
        view = self._read(session_id, offset, None)
        return json_response({"success": True, "status": status, "steer": steer_body(view)})

    def _mirror(self, event: EventBase) -> None:
        if self.mirror is not None:
            self.mirror.submit(event)
