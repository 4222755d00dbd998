"""Optional tracing (docs/operations.md), with the OpenTelemetry SDK's in-memory exporter: one trace
holds a steer's POST span and the model call that carried it — for a steer accepted before
the first turn and for one accepted mid-turn — and without the `otel` extra's setup nothing
of OpenTelemetry is imported at all."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from daemon.agent.modelcall import CallSettings
from daemon.bus.streams.eventsink import EventSink
from daemon.fakemodel import ScriptedModel, reply, tool
from daemon.host import tracing
from tests.agent.conftest import NOTES, Harness
from tests.web.conftest import make_web

pytestmark = pytest.mark.processes

sdk_trace = pytest.importorskip("opentelemetry.sdk.trace", reason="the otel extra is not installed")
in_memory = pytest.importorskip("opentelemetry.sdk.trace.export.in_memory_span_exporter")
export = pytest.importorskip("opentelemetry.sdk.trace.export")

ROOT = Path(__file__).resolve().parents[2]
ROOT_DIRS = tuple(str(ROOT / top) for top in ("daemon", "web", "worker", "cli"))


@pytest.fixture
def spans() -> Iterator[Any]:
    exporter = in_memory.InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(export.SimpleSpanProcessor(exporter))
    tracing.use_provider(provider)
    try:
        yield exporter
    finally:
        tracing.use_provider(None)
        provider.shutdown()


def advance() -> Any:
    return tool("continue_workflow", notes=NOTES)


def test_a_steers_trace_reaches_the_model_call_that_carried_it(
    real_redis: redis.Redis, tmp_path: Path, spans: Any
) -> None:
    web = make_web(real_redis, tmp_path / "web")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    harness = Harness(web.bus, web.registry, workspace, tmp_path / "data")
    harness.events.sink = EventSink(web.bus.client, web.bus.keys, None)
    sid = harness.create()

    caller = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"  # the coordinator's own trace
    early = web.steer(
        sid, {"text": "Before the first turn: read the README."}, headers={"traceparent": caller}
    )
    assert early.status_code == 200

    def first_call(request: Any) -> Any:
        # while turn 1's call is out, a coordinator steers: turn 2's request carries it
        assert web.steer(sid, {"text": "Mid-run: keep it short."}).status_code == 200
        return reply(advance())

    model = ScriptedModel([first_call, reply(advance())])  # type: ignore[list-item]
    assert harness.run(model, calls=CallSettings()) == "workflow_complete"
    web.mirror.flush()

    finished = spans.get_finished_spans()
    posts = [s for s in finished if s.name == "POST /api/v2/sessions/{sessionId}/steer"]
    calls = sorted((s for s in finished if s.name == "worktrain.model_call"), key=lambda s: s.start_time)
    turns = [s for s in finished if s.name == "worktrain.turn"]
    tools = [s for s in finished if s.name == "worktrain.tool"]
    assert len(posts) == 2 and len(calls) == 2 and len(turns) == 2 and len(tools) == 2
    for post, call in zip(posts, calls, strict=True):
        # one trace: the steer's POST span is the parent of the model call that carried it
        assert call.context.trace_id == post.context.trace_id
        assert call.parent is not None and call.parent.span_id == post.context.span_id
        linked = {link.context.span_id for link in call.links}
        turn = next(t for t in turns if t.context.span_id in linked)  # and it links to its turn
        assert turn.attributes["worktrain.turn"] in (1, 2)
    assert {t.parent.span_id for t in tools if t.parent} <= {t.context.span_id for t in turns}
    assert posts[0].context.trace_id == int("ab" * 16, 16)  # the caller's trace is continued
    assert posts[0].parent is not None and posts[0].parent.span_id == int("cd" * 8, 16)
    stored = web.bus.journal(sid)
    assert stored is not None  # the journal is there; the traceparent rode in the pending steer


def test_without_the_extra_worktrain_never_imports_opentelemetry(tmp_path: Path) -> None:
    """In a fresh interpreter where `opentelemetry` cannot be imported (as without the otel
    extra), the web app, the worker and the agent loop import and trace nothing, and no
    module of WorkTrain even tries to import it (redis-py's own optional probe may)."""
    script = textwrap.dedent(
        f"""
        import sys
        ours = tuple({ROOT_DIRS!r})
        tried = []

        class NoOtel:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] != "opentelemetry":
                    return None
                frame = sys._getframe(1)
                def machinery(f):
                    return "importlib" in f.f_code.co_filename or f.f_code.co_filename.startswith("<")

                while frame and machinery(frame):
                    frame = frame.f_back
                tried.append(frame.f_code.co_filename if frame else "?")
                raise ImportError("no otel extra")

        sys.meta_path.insert(0, NoOtel())
        from daemon.host import tracing
        from daemon.agent import loop, modelcall
        import web.app, web.serve, web.steerpost, worker.shared, worker.jobs
        assert not tracing.setup("probe"), "no OTEL_EXPORTER_OTLP_ENDPOINT: off"
        with tracing.span("x"), tracing.carrying(["00-" + "1" * 32 + "-" + "2" * 16 + "-01"]):
            with tracing.model_call_span({{}}):
                assert tracing.traceparent() is None
        turn = tracing.TurnSpan()
        turn.begin({{}})
        turn.end()
        mine = [f for f in tried if f.startswith(ours)]
        assert not mine, mine
        assert not [m for m in sys.modules if m.startswith("opentelemetry")]
        print("clean")
        """
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stdout.strip() == "clean", done.stderr


def test_with_the_endpoint_set_a_process_traces(tmp_path: Path) -> None:
    """OTEL_EXPORTER_OTLP_ENDPOINT set (to a closed port: export fails quietly, in the
    background): `setup` installs the SDK provider and spans carry a traceparent."""
    script = textwrap.dedent(
        """
        from daemon.host import tracing
        assert tracing.setup("probe")
        with tracing.span("x"):
            parent = tracing.traceparent()
        assert parent and parent.startswith("00-") and len(parent) == 55, parent
        print("traced")
        """
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
    }
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stdout.strip() == "traced", done.stderr
