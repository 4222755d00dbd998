"""The Flask app factory: every dependency is passed in, nothing is a module-level singleton.

`create_app(bus=None, ...)` is the standalone console (README's Console): read-only routes from the
JSONL mirrors, steer answers 503 `no_steer_channel`, the other Redis-only routes 503
`standalone_unavailable`. web/serve.py builds the real dependencies from Settings.

Routes: the table in web/routes.py (also the source of `/api/v2/openapi.json`), each bound
here to its view. Every `/api/v2` request first passes `web.auth.request_guard` (bearer
token when WORKTRAIN_API_TOKEN is set, else a loopback Host); `/healthz` (liveness,
touches nothing) and `/readyz` (one Redis PING) stay open, and so do the browser console's
pages and files (web/console, README's Console).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import redis
from flask import Flask, Response, request

from daemon.bus.fleet.metrics import NULL_RECORDER, MetricsRecorder
from daemon.bus.outbox.webhooks import WebhookOutbox
from daemon.bus.replication import Replication
from daemon.bus.session.forks import ForkStore
from daemon.bus.session.registry import SessionRegistry
from daemon.bus.session.steerbus import SteerBus
from daemon.bus.streams.eventsink import EventSink
from daemon.bus.streams.mirror import EventMirror
from daemon.host import secrets, tracing
from daemon.host.config import Settings
from daemon.host.redisconn import on_primary
from daemon.schema.webhookpayloads import WebhookRouting
from daemon.triggers.loading import TriggerSet
from daemon.triggers.setup import build_firing
from daemon.workflows import Catalog
from web import openapi
from web.auth import request_guard
from web.console import register_console
from web.errors import ApiError, json_response, register_error_handlers
from web.fastpath import SteerFastPath
from web.fleet import FleetReader
from web.forks import ForkRoutes
from web.jobs import JobQueue
from web.metrics import MetricsRoute
from web.models import SteersQuery, parse_query
from web.readers import EventReader
from web.replicated import register_replication
from web.routes import API, ROUTES
from web.sessions import SessionRoutes
from web.signals import SignalRoutes
from web.steerchecks import SteerLimits
from web.steeredits import SteerManagementRoutes
from web.steerpost import SteerRoute
from web.streams import LiveEvents, SessionEventStream, StreamRoutes
from web.threadbudget import ThreadBudget
from web.triggers import TriggerRoutes
from web.webhooks import WebhookRoutes
from web.workspaces import WorkspacePolicy

log = logging.getLogger(__name__)

METRICS_PATH = "/metrics"  # Prometheus' scrape path: outside /api/v2, behind the same guard
MAX_CONTENT_LENGTH = 1024 * 1024  # 1 MiB (README's HTTP API): larger bodies answer 413
DEFAULT_EVENT_STREAMS = 4  # per process, when the server does not say (web/serve.py does)

STANDALONE = ApiError(
    503,
    "standalone_unavailable",
    "Not available in standalone mode (no Redis): only events, issues and workflows are served.",
)

View = Callable[..., Response]


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
    budget: ThreadBudget | None = None,
    metrics: MetricsRecorder = NULL_RECORDER,
    replication: Replication | None = None,
    triggers: TriggerSet | None = None,
) -> Flask:
    """The app. `fast_steer=False` serves steers through Flask only (tests compare the two).
    `budget`: the threads streams, receipt waits and bodies may hold together (web/serve.py
    passes the server's; None: each kind has only its own cap). `triggers`: the triggers
    file, read and checked (README's Triggers); None: no triggers."""
    app = Flask("worktrain")
    app.config["MAX_CONTENT_LENGTH"] = MAX_CONTENT_LENGTH
    # No redirects for `//` or a trailing `/`: Werkzeug answers those with an HTML 308 that
    # bypasses error handlers. Such paths are plain 404s (JSON) instead.
    app.url_map.merge_slashes = False
    app.url_map.strict_slashes = False
    register_error_handlers(app)
    guard = request_guard(settings.api_token)
    # a provider's webhook is authenticated by its own signature (README's Triggers), not the token
    signed = frozenset(route.name for route in ROUTES if route.auth == "signature")

    @app.before_request
    def _guard() -> None:
        # the steer's view runs the guard first of the steer's checks; a provider's webhook has its own
        if request.endpoint == "steer" or request.endpoint in signed:
            return
        if request.path.startswith(API) or request.path == METRICS_PATH:
            guard(request.environ)

    if replication is not None and replication.enabled:
        register_replication(app, replication)

    limits = SteerLimits.of(settings)
    steer = SteerRoute(bus, mirror, guard, MAX_CONTENT_LENGTH, limits, metrics)
    views = _views(bus, registry, enqueue, catalog, settings, event_reader, budget)
    if "dispatch" in views and bus is not None and registry is not None and enqueue is not None:
        views.update(_trigger_views(bus, enqueue, catalog, settings, metrics, triggers or TriggerSet()))
    if bus is not None and "session_events" in views:
        manage = SteerManagementRoutes(bus, mirror, limits=limits, budget=budget, metrics=metrics)
        views.update(_steer_management_views(views, manage))
    if bus is not None and registry is not None:
        views.update(_fleet_views(FleetReader(bus.client, bus.keys, registry, settings.max_model_calls)))
    views["steer"] = steer.steer
    for route in ROUTES:
        # No automatic OPTIONS answer: it would be an empty body, and every answer here is JSON.
        app.add_url_rule(
            route.path,
            route.name,
            views.get(route.name, _standalone),
            methods=[route.method],
            provide_automatic_options=False,
        )
    if fast_steer:
        fast = SteerFastPath(app.wsgi_app, steer, replication)
        app.wsgi_app = fast  # type: ignore[method-assign]
    register_console(app, read_only=bus is None, token_required=bool(settings.api_token))
    return app


def _views(
    bus: SteerBus | None,
    registry: SessionRegistry | None,
    jobs: JobQueue | None,
    catalog: Catalog,
    settings: Settings,
    event_reader: EventReader,
    budget: ThreadBudget | None,
) -> dict[str, View]:
    """The view of each route name; a Redis route without Redis is left out (503)."""
    # One set of stream slots for the session streams and the live `/events` stream.
    sse = (
        SessionEventStream(
            bus.client, bus.keys, settings.max_event_streams or DEFAULT_EVENT_STREAMS, budget=budget
        )
        if bus is not None
        else None
    )
    streams = StreamRoutes(event_reader, LiveEvents(sse) if sse is not None else None)

    def workflows() -> Response:
        data = {"workflows": catalog.summaries(), "problems": catalog.problems, "skipped": catalog.skipped()}
        return json_response({"success": True, "data": data})

    workflow_ids = tuple(sorted(catalog.workflows))

    def document() -> Response:
        return json_response(openapi.document(workflow_ids))

    views: dict[str, View] = {
        "events": streams.events,
        "issues": streams.issues,
        "workflows": workflows,
        "openapi": document,
        **_health_views(bus.client if bus is not None else None),
    }
    if bus is None or registry is None or jobs is None or sse is None:
        return views
    workspaces = WorkspacePolicy.of(settings.workspace_roots, settings.data_dir)
    # a cancel that ends a queued session queues its session.finished (README's Webhooks)
    outbox = WebhookOutbox(
        bus.client,
        bus.keys,
        WebhookRouting.of(settings.webhook_urls, settings.url),
        settings.retention_seconds,
    )
    events = EventSink(bus.client, bus.keys, settings.data_dir, webhooks=outbox)
    routes = SessionRoutes(bus, registry, jobs, catalog, events, workspaces, settings.webhook_receivers)
    forks = ForkRoutes.of(ForkStore(bus, registry, events, outbox), routes.dispatcher, catalog, settings)
    views.update(
        dispatch=traced("POST /api/v2/auto/dispatch", routes.dispatch),
        sessions=routes.list_sessions,
        session=routes.get_session,
        conversation=routes.conversation,
        cancel=routes.cancel,
        steers=routes.steers,
        session_events=sse.events,
        fork=forks.fork,
    )
    signals = SignalRoutes(bus)
    views.update(session_signals=signals.session_signals, signals=signals.all_signals)
    webhooks = WebhookRoutes(bus)
    views.update(session_webhooks=webhooks.session_webhooks, webhooks=webhooks.webhooks)
    return views


def _trigger_views(
    bus: SteerBus,
    jobs: JobQueue,
    catalog: Catalog,
    settings: Settings,
    metrics: MetricsRecorder,
    triggers: TriggerSet,
) -> dict[str, View]:
    """README's Triggers: the providers' webhooks fire through the same dispatch as
    `POST /api/v2/auto/dispatch` (daemon/triggers/firing.py)."""
    firing = build_firing(settings, bus, jobs, catalog, metrics)
    routes = TriggerRoutes(triggers, firing.store, firing, secrets.value)
    return {
        "triggers": routes.list_triggers,
        "trigger": routes.one,
        "trigger_webhook": traced("POST /api/v2/triggers/<id>", routes.webhook),
    }


def _steer_management_views(views: dict[str, View], manage: SteerManagementRoutes) -> dict[str, View]:
    """README's Managing steers: one steer (by offset, or by clientMsgId on the journal's route),
    retract, edit."""
    journal = views["steers"]

    def steers(session_id: str) -> Response:
        client_msg_id = parse_query(SteersQuery, request.args).clientMsgId
        if client_msg_id is None:
            return journal(session_id)
        return manage.by_client_msg_id(session_id, client_msg_id)

    return {
        "steers": steers,
        "steer_one": manage.one,
        "steer_retract": manage.retract,
        "steer_edit": manage.edit,
    }


def traced(name: str, view: View) -> View:
    """The view inside a span of its own when tracing is on (daemon/host/tracing.py; set up
    before the app is built), else the view itself."""
    if not tracing.active():
        return view

    def run(**kwargs: Any) -> Response:
        with tracing.span(name, server=True):
            return view(**kwargs)

    return run


def _fleet_views(reader: FleetReader) -> dict[str, View]:
    """docs/operations.md: the workers, the fleet summary, and the Prometheus scrape target."""
    return {
        "workers": reader.list_workers,
        "fleet": reader.fleet,
        "fleet_history": reader.fleet_history,
        "metrics": MetricsRoute(reader).metrics,
    }


def not_ready(sentence: str) -> Response:
    body = {"success": False, "code": "not_ready", "error": sentence}
    return json_response(body, 503, {"Retry-After": "1"})


def _health_views(client: redis.Redis | None) -> dict[str, View]:
    def healthz() -> Response:
        return json_response({"success": True, "status": "ok"})

    def readyz() -> Response:
        if client is None:
            return json_response({"success": True, "status": "ready", "mode": "standalone"})
        try:
            primary = on_primary(client)  # exactly one round trip (ROLE)
        except redis.RedisError as exc:
            log.warning("not ready: Redis does not answer (%s)", exc)
            # The sentence names no address: /readyz is open to anyone who reaches the port.
            return not_ready("Redis does not answer.")
        if not primary:  # a replica (a failover under way, or REDIS_URL names a replica)
            log.warning("not ready: Redis answers as a replica, not a primary")
            return not_ready("Redis is a replica, not a writable primary.")
        return json_response({"success": True, "status": "ready"})

    return {"healthz": healthz, "readyz": readyz}
