"""A change answered 2xx only once WAIT confirms it (WORKTRAIN_REDIS_WAIT_REPLICAS).

Each change request (POST, PUT, PATCH, DELETE under the API) is one step
(`daemon.host.instep.pinning`): every command it sends goes through one connection per
pool, and the confirmation runs WAIT on that very connection before the answer leaves, so
it confirms the server that took the write (daemon/bus/replication.py has the rule). The
steer fast path (web/fastpath.py) does the same around its own answer.
"""

from __future__ import annotations

import contextlib

import redis
from flask import Flask, Response, g, request

from daemon.bus.replication import NotReplicated, Replication
from daemon.host.instep import PinScope, pinning
from daemon.host.redisconn import is_outage
from web.errors import CHANGES, ApiError, internal_error, not_replicated, steer_bus_unavailable
from web.routes import API


def confirm_or_error(replication: Replication, scope: PinScope | None) -> ApiError | None:
    """None when the step's changes are confirmed; else the 503 to answer."""
    try:
        replication.confirm(scope)
    except NotReplicated as exc:
        return not_replicated(exc)
    except redis.RedisError as exc:
        return steer_bus_unavailable(exc) if is_outage(exc) else internal_error(exc)
    return None


def step_for(replication: Replication | None) -> contextlib.AbstractContextManager[PinScope | None]:
    """The pinned step of one change (nothing to pin without WAIT)."""
    if replication is None or not replication.enabled:
        return contextlib.nullcontext()
    return pinning()


def register_replication(app: Flask, replication: Replication) -> None:
    """Pin each change request's connections, and confirm its 2xx before it is sent."""

    def is_change() -> bool:
        return request.method in CHANGES and request.path.startswith(API)

    @app.before_request
    def _pin() -> None:
        if is_change():
            steps = contextlib.ExitStack()
            g.worktrain_step = (steps, steps.enter_context(pinning()))

    @app.after_request
    def _confirm(response: Response) -> Response:
        step = g.get("worktrain_step")
        if step is None or not 200 <= response.status_code < 300:
            return response
        error = confirm_or_error(replication, step[1])
        return response if error is None else error.response()

    @app.teardown_request
    def _unpin(_: BaseException | None) -> None:
        step = g.pop("worktrain_step", None)
        if step is not None:
            step[0].close()
