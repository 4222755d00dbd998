"""The Flask app factory: every dependency is passed in, nothing is a module-level singleton.

`create_app(bus=None, ...)` is the standalone console (SPEC §3.5): read-only routes from the
JSONL mirrors, steer answers 503 `no_steer_channel`, the other Redis-only routes 503
`standalone_unavailable`. web/serve.py builds the real dependencies from Settings.

Routes (SPEC §3): under `/api/v2` (bearer token when WORKTRAIN_API_TOKEN is set), plus
`/healthz` (liveness, touches nothing) and `/readyz` (one Redis PING) which stay open, and
the browser console's pages and files (web/console, SPEC §3.6), static and open as well.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import redis
from flask import Flask, Response, request

from daemon.bus import SteerBus
from daemon.config import Settings
from daemon.events import EventSink
from daemon.registry import SessionRegistry
from daemon.workflows import Catalog
from web.auth import bearer_guard
from web.console import register_console
from web.errors import ApiError, json_response, register_error_handlers
from web.fastpath import SteerFastPath
from web.jobs import JobQueue
from web.mirror import EventMirror
from web.readers import EventReader
from web.sessions import SessionRoutes
from web.steer import SteerRoute
from web.streams import LiveEvents, SessionEventStream, StreamRoutes

log = logging.getLogger(__name__)

API = "/api/v2"
MAX_CONTENT_LENGTH = 1024 * 1024  # 1 MiB (SPEC §3): larger bodies answer 413

STANDALONE = ApiError(
    503,
    "standalone_unavailable",
    "Not available in standalone mode (no Redis): only events, issues and workflows are served.",
)


def _route(app: Flask, rule: str, view: Callable[..., Response], methods: list[str], name: str) -> None:
    # No automatic OPTIONS answer: it would be an empty body, and every answer here is JSON.
    app.add_url_rule(rule, name, view, methods=methods, provide_automatic_options=False)


def _standalone(**_: Any) -> Response:
    raise STANDALONE


def create_app(
    *,
    bus: SteerBus | None,
    registry: SessionRegistry | None,
    enqueue: JobQueue | None,
    catalog: Catalog,
    settings: Settings,
    event_reader: EventReader,
    mirror: EventMirror | None = None,
    fast_steer: bool = True,
) -> Flask:
    """The app. `fast_steer=False` serves steers through Flask only (tests compare the two)."""
    app = Flask("worktrain")
    app.config["MAX_CONTENT_LENGTH"] = MAX_CONTENT_LENGTH
    # No redirects for `//` or a trailing `/`: Werkzeug answers those with an HTML 308 that
    # bypasses error handlers. Such paths are plain 404s (JSON) instead.
    app.url_map.merge_slashes = False
    app.url_map.strict_slashes = False
    register_error_handlers(app)
    if settings.api_token:
        guard = bearer_guard(settings.api_token)

        @app.before_request
        def _auth() -> None:
            if request.path.startswith(API):
                guard()

    _health_routes(app, bus.client if bus is not None else None)
    steer = SteerRoute(bus, mirror)
    _route(app, f"{API}/sessions/<session_id>/steer", steer.steer, ["POST"], "steer")
    if fast_steer:
        fast = SteerFastPath(app.wsgi_app, steer, settings.api_token, MAX_CONTENT_LENGTH)
        app.wsgi_app = fast  # type: ignore[method-assign]
    live = LiveEvents(SessionEventStream(bus.client, bus.keys)) if bus is not None else None
    streams = StreamRoutes(event_reader, live)
    _route(app, f"{API}/events", streams.events, ["GET"], "events")
    _route(app, f"{API}/issues", streams.issues, ["GET"], "issues")

    def workflows() -> Response:
        data = {"workflows": catalog.summaries(), "problems": catalog.problems, "skipped": catalog.skipped()}
        return json_response({"success": True, "data": data})

    _route(app, f"{API}/workflows", workflows, ["GET"], "workflows")
    _session_routes(app, bus, registry, enqueue, catalog, settings)
    register_console(app, read_only=bus is None, token_required=bool(settings.api_token))
    return app


def _session_routes(
    app: Flask,
    bus: SteerBus | None,
    registry: SessionRegistry | None,
    jobs: JobQueue | None,
    catalog: Catalog,
    settings: Settings,
) -> None:
    session = f"{API}/sessions/<session_id>"
    if bus is None or registry is None or jobs is None:
        for rule, methods, name in (
            (f"{API}/auto/dispatch", ["POST"], "dispatch"),
            (f"{API}/sessions", ["GET"], "sessions"),
            (session, ["GET"], "session"),
            (f"{session}/cancel", ["POST"], "cancel"),
            (f"{session}/steers", ["GET"], "steers"),
            (f"{session}/events", ["GET"], "session_events"),
        ):
            _route(app, rule, _standalone, methods, name)
        return
    routes = SessionRoutes(bus, registry, jobs, catalog, EventSink(bus.client, bus.keys, settings.data_dir))
    _route(app, f"{API}/auto/dispatch", routes.dispatch, ["POST"], "dispatch")
    _route(app, f"{API}/sessions", routes.list_sessions, ["GET"], "sessions")
    _route(app, session, routes.get_session, ["GET"], "session")
    _route(app, f"{session}/cancel", routes.cancel, ["POST"], "cancel")
    _route(app, f"{session}/steers", routes.steers, ["GET"], "steers")
    sse = SessionEventStream(bus.client, bus.keys)
    _route(app, f"{session}/events", sse.events, ["GET"], "session_events")


def _health_routes(app: Flask, client: redis.Redis | None) -> None:
    def healthz() -> Response:
        return json_response({"success": True, "status": "ok"})

    def readyz() -> Response:
        if client is None:
            return json_response({"success": True, "status": "ready", "mode": "standalone"})
        try:
            client.ping()  # exactly one round trip
        except redis.RedisError as exc:
            log.warning("not ready: Redis does not answer (%s)", exc)
            return json_response(
                {"success": False, "code": "not_ready", "error": f"Redis does not answer: {exc}"},
                503,
                {"Retry-After": "1"},
            )
        return json_response({"success": True, "status": "ready"})

    _route(app, "/healthz", healthz, ["GET"], "healthz")
    _route(app, "/readyz", readyz, ["GET"], "readyz")
