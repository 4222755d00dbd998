"""`worktrain web`: the app built from Settings, served by a production WSGI server.

Two servers, both embedded so that `worktrain web` is one process tree:
- granian (default, picked by measurement: docs/benchmarks.md, "Steer ingress"): Rust HTTP,
  `workers` processes, each running the WSGI app in `threads` blocking threads. It loads
  the app by name (`web.wsgi:app_from_env`) in each worker.
- gunicorn (`--server gunicorn`), gthread workers, as a library (`BaseApplication`); each
  worker builds its own app (`load()` runs after the fork).
Either way Redis pools, the catalog and the event mirror's thread belong to the worker
process that uses them. A long-lived SSE stream holds one thread for its duration, and so
does a receipt wait: each process serves at most half its threads as streams
(WORKTRAIN_MAX_EVENT_STREAMS), and streams, waits and bodies share one ThreadBudget that
always leaves threads for /readyz, reads and steers (web/threadbudget.py). Slow clients are
bounded (WORKTRAIN_READ_TIMEOUT_SECONDS, web/deadlines.py): gunicorn times out every socket
read; granian times out header reads, and bounds how many requests with a body it handles
at once. The listening socket is bound here, without SO_REUSEPORT (web/listener.py).
Exposed beyond loopback, put a buffering reverse proxy (nginx, Caddy) with TLS in front:
it absorbs slow clients before they reach a thread (README, "Exposing the API").
"""

from __future__ import annotations

import logging
import os
import signal
from dataclasses import dataclass, replace
from typing import Any

from flask import Flask
from gunicorn.app.base import BaseApplication

from daemon.bus.fleet.metrics import MetricsRecorder
from daemon.bus.keys import Keys
from daemon.bus.replication import Replication
from daemon.bus.session.registry import SessionRegistry
from daemon.bus.session.steerbus import SteerBus
from daemon.bus.streams.mirror import EventMirror
from daemon.host import secrets, tracing
from daemon.host.bind import check_bind
from daemon.host.config import Settings
from daemon.host.lifeline import die_with_parent
from daemon.host.redisconn import connect, warn_if_unreplicated, warn_if_unverified
from daemon.host.startstop import raise_if_stop_asked
from daemon.triggers.setup import load_triggers
from daemon.workflows import load_catalog
from web.app import create_app
from web.deadlines import BodySlots, TimedConnection
from web.jobs import RqJobQueue
from web.listener import bind_listener, check_port_free, own_socket_granian
from web.readers import RedisReader
from web.standalone import JsonlReader
from web.threadbudget import BODY_RESERVE, ThreadBudget

log = logging.getLogger(__name__)

# How `worktrain web` passes its flags to the forked server workers (web/wsgi.py reads them).
STANDALONE_ENV = "WORKTRAIN_WEB_STANDALONE"
THREADS_ENV = "WORKTRAIN_WEB_THREADS"  # granian's threads per worker: its ThreadBudget, bodies bounded
# The pid of the server's main process: each worker dies with it (web/wsgi.py), so a
# `kill -9` of `worktrain web` leaves no worker listening on its port.
PARENT_PID_ENV = "WORKTRAIN_WEB_PARENT_PID"

# A dead or stalled Redis must become a fast 503, not a hung request thread. Every request
# is one or two short commands; the SSE route blocks at most web.streams.BLOCK_MS (1 s).
WEB_SOCKET_TIMEOUT = 3.0
BODY_SLOT_WAIT_SECONDS = 0.25  # a steer's body takes milliseconds: a slot frees within this
SERVERS = ("granian", "gunicorn")
DEFAULT_SERVER = "granian"
# (workers, threads) per server, measured on 2 cores (docs/benchmarks.md): granian 2 x 2 is
# ~15% faster on steers alone, 2 x 8 leaves room for SSE streams (one thread each);
# gunicorn 3 x 4 is within noise of its best gthread shape.
DEFAULT_SHAPE = {"granian": (2, 8), "gunicorn": (3, 4)}


def build_app(
    settings: Settings, standalone: bool = False, threads: int = 0, bound_bodies: bool = False
) -> Flask:
    """The app for a server process with `threads` threads (0: unknown, no shared budget).
    Streams, receipt waits and (with `bound_bodies`: granian, whose body reads never time
    out, web/deadlines.py) requests with a body share the process's ThreadBudget, which
    always leaves threads for /readyz, reads and steers (web/threadbudget.py)."""
    budget = ThreadBudget(threads, BODY_RESERVE if bound_bodies else 0) if threads > 0 else None
    app = _app(settings, standalone, budget)
    if bound_bodies and budget is not None:
        # A body that finds the pool full waits only briefly: a waiter holds a thread too, and
        # a queue of them behind stalled bodies kept /readyz waiting for seconds (measured).
        wait = min(BODY_SLOT_WAIT_SECONDS, settings.read_timeout_seconds)
        app.wsgi_app = BodySlots(app.wsgi_app, budget.pool, wait)  # type: ignore[method-assign]
    return app


def _app(settings: Settings, standalone: bool, budget: ThreadBudget | None = None) -> Flask:
    catalog = load_catalog(settings.workflows_dir)
    if standalone:
        return create_app(
            bus=None,
            registry=None,
            enqueue=None,
            catalog=catalog,
            settings=settings,
            event_reader=JsonlReader(settings.data_dir),
        )
    tracing.setup("worktrain-web")  # with OTEL_EXPORTER_OTLP_ENDPOINT and the otel extra only
    url = settings.redis_url_or_default
    warn_if_unverified(url, "worktrain web")
    warn_if_unreplicated(url, settings.redis_wait_replicas, "worktrain web")
    client = connect(url, decode=True, socket_timeout=WEB_SOCKET_TIMEOUT)
    keys = Keys(settings.redis_prefix)
    triggers = load_triggers(settings, "web", catalog, secrets.value)  # serve() checked it already
    return create_app(
        bus=SteerBus(client, keys, retention_seconds=settings.retention_seconds),
        registry=SessionRegistry(client, keys),
        enqueue=RqJobQueue(connect(url, decode=False, socket_timeout=WEB_SOCKET_TIMEOUT)),
        catalog=catalog,
        settings=settings,
        event_reader=RedisReader(client, keys),
        mirror=EventMirror(client, keys, settings.data_dir),
        budget=budget,
        metrics=MetricsRecorder(client, keys),
        replication=Replication(client, keys, settings.redis_wait_replicas, settings.redis_wait_ms),
        triggers=triggers,
    )


@dataclass(frozen=True)
class ServeOptions:
    host: str
    port: int
    workers: int | None = None  # None: the server's default shape
    threads: int | None = None
    standalone: bool = False
    server: str = DEFAULT_SERVER

    def shape(self) -> tuple[int, int]:
        workers, threads = DEFAULT_SHAPE[self.server]
        return self.workers or workers, self.threads or threads

    def event_streams(self, settings: Settings) -> int:
        """SSE streams per process: the setting, else half the threads (one stays for requests)."""
        return settings.max_event_streams or max(1, self.shape()[1] // 2)

    @property
    def bind(self) -> str:
        host = f"[{self.host}]" if ":" in self.host and not self.host.startswith("[") else self.host
        return f"{host}:{self.port}"


class WebServer(BaseApplication):  # type: ignore[misc]
    """Gunicorn as a library: no config file, no argv parsing, our options only."""

    def __init__(self, settings: Settings, options: ServeOptions) -> None:
        self.settings = settings
        self.serve_options = options
        super().__init__()

    def gunicorn_options(self) -> dict[str, Any]:
        options = self.serve_options
        workers, threads = options.shape()
        return {
            "bind": [options.bind],
            "workers": workers,
            "threads": threads,
            "worker_class": "web.deadlines.TimedThreadWorker",  # gthread, with socket read timeouts
            "timeout": 30,
            "graceful_timeout": 5,  # `worktrain up` must stop everything within 10 s
            "keepalive": 5,
            "accesslog": None,
            "errorlog": "-",
            "loglevel": "info",
            "proc_name": "worktrain-web",
            "worker_tmp_dir": "/dev/shm" if os.path.isdir("/dev/shm") else None,
        }

    def load_config(self) -> None:
        for key, value in self.gunicorn_options().items():
            if value is not None:
                self.cfg.set(key, value)
        TimedConnection.read_seconds = self.settings.read_timeout_seconds  # the forked workers inherit it

    def load(self) -> Flask:
        # in the forked worker: it dies with the arbiter (gunicorn's own check of the parent
        # id runs only between requests, and not in a worker busy with a long stream)
        die_with_parent(os.getppid(), signal.SIGTERM)
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        settings = self.settings.model_copy(
            update={"max_event_streams": self.serve_options.event_streams(self.settings)}
        )
        return build_app(settings, self.serve_options.standalone, threads=self.serve_options.shape()[1])


def serve_granian(settings: Settings, options: ServeOptions) -> None:
    import setproctitle
    from granian.constants import HTTPModes, Interfaces
    from granian.http import HTTP1Settings

    listener = bind_listener(options.host.strip("[]"), options.port)  # PortInUse: before anything starts
    workers, threads = options.shape()
    # The workers build the app from the environment and the secrets they inherit (web/wsgi.py).
    os.environ[STANDALONE_ENV] = "1" if options.standalone else ""
    os.environ[THREADS_ENV] = str(threads)
    os.environ["WORKTRAIN_MAX_EVENT_STREAMS"] = str(options.event_streams(settings))
    os.environ[PARENT_PID_ENV] = str(os.getpid())
    server = own_socket_granian()(
        "web.wsgi:app_from_env",
        factory=True,
        address=options.host.strip("[]"),
        port=options.port,
        interface=Interfaces.WSGI,
        http=HTTPModes.http1,  # a JSON API: HTTP/1.1 only skips protocol detection per connection
        http1_settings=HTTP1Settings(header_read_timeout=int(settings.read_timeout_seconds * 1000)),
        workers=workers,
        blocking_threads=threads,
        log_access=False,
        websockets=False,
        workers_kill_timeout=5,  # `worktrain up` must stop everything within 10 s
        # granian retitles its processes when setproctitle is installed (it is: cli/tiers.py):
        # keep `worktrain web ...` for the master, `worktrain web ... worker-N` for the workers
        process_name=setproctitle.getproctitle(),
    )
    server.listener = listener  # the workers serve on this socket (web/listener.py)
    server.serve()


def serve(settings: Settings, options: ServeOptions) -> None:
    """Run until SIGTERM/SIGINT. Raises daemon.host.bind.UnsafeBind before listening on a bad
    address, or with a weak token; web.listener.PortInUse when another process holds the port;
    daemon.triggers.loading.TriggerFileError for a triggers file with a problem (README's Triggers)."""
    options = replace(options, host=check_bind(options.host, settings.api_token))
    if not options.standalone:
        load_triggers(settings, "web", load_catalog(settings.workflows_dir), secrets.value)
    if options.server not in SERVERS:
        raise ValueError(f"unknown server {options.server!r}; one of {', '.join(SERVERS)}")
    if options.standalone:
        log.info("standalone console: read-only, from the JSONL mirrors in %s", settings.data_dir)
    raise_if_stop_asked()  # one asked while it started, caught on the way: the servers' own handlers follow
    if options.server == "granian":
        serve_granian(settings, options)
    else:
        check_port_free(options.host.strip("[]"), options.port)  # gunicorn binds it itself
        WebServer(settings, options).run()
