"""Helpers for the agent tests: a session on the bus, a scripted model, a fake clock."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from daemon.agent.modelcall import CallSettings
from daemon.bus.session.registry import NewSession, SessionRegistry
from daemon.bus.session.steerbus import SteerBus
from daemon.bus.streams.eventsink import EventSink
from daemon.bus.streams.issues import IssueSink
from daemon.fakemodel import ScriptedModel
from daemon.schema.events import EventBase
from daemon.session.gitbox import boxes
from daemon.session.runner import WorkerServices, run_session
from daemon.tools import ToolContext, WorkflowCursor, default_toolbox
from daemon.turn.messages import Message, ToolUseBlock, parse_message
from daemon.workflows import Workflow, WorkflowLimits, WorkflowStep, load_catalog
from daemon.workspaces.worktree import Made, ensure_worktree, main_repository

FIXTURE_WORKFLOWS = Path(__file__).resolve().parents[1] / "fixtures" / "workflows"
CATALOG = load_catalog(FIXTURE_WORKFLOWS)
TWO_STEP = CATALOG.workflows["two-step"]
STEP1, STEP2 = TWO_STEP.steps[0].prompt, TWO_STEP.steps[1].prompt
NOTES = "I looked at everything in the workspace and here is what I found, in detail."


class RecordingEvents:
    """An event sink that keeps what it is given (and never raises, like EventSink); with
    `sink`, it also writes them where the worker's sink would (a resuming attempt reads the
    session's stream)."""

    def __init__(self, sink: EventSink | None = None) -> None:
        self.events: list[EventBase] = []
        self.sink = sink

    def emit(self, *events: EventBase) -> None:
        self.events.extend(events)
        if self.sink is not None:
            self.sink.emit(*events)

    def kinds(self) -> list[str]:
        return [e.kind for e in self.events]  # type: ignore[attr-defined]

    def of(self, kind: str) -> list[Any]:
        return [e for e in self.events if e.kind == kind]  # type: ignore[attr-defined]


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []
        self.on_sleep: Any = None  # called with each wait (a test looks at the world mid-wait)

    def monotonic(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def sleep(self, seconds: float, wake: Any = None) -> bool:
        """A wait passes at once: the clock moves on by it (and is never woken)."""
        self.now += seconds
        self.slept.append(seconds)
        if self.on_sleep is not None:
            self.on_sleep(seconds)
        return False


def git(repo: Path, *args: str) -> str:
    """`git -C repo ARGS` run by the test itself (outside any box); its stdout, stripped."""
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def make_repo(repo: Path, files: dict[str, str] | None = None) -> Path:
    """A repository on `main` with one commit of `files` (default: app.py)."""
    repo.mkdir()
    for name, text in (files or {"app.py": "VALUE = 1\n"}).items():
        (repo / name).write_text(text)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "initial")
    return repo


def workflow_with(limits: WorkflowLimits, steps: int = 2) -> Workflow:
    return Workflow(
        id="limited",
        name="Limited",
        steps=tuple(
            WorkflowStep(id=f"s{i}", title=f"Step {i}", prompt=f"Do step {i}.") for i in range(1, steps + 1)
        ),
        limits=limits,
    )


@dataclass
class Harness:
    """One session, registered and ready to run with a scripted model."""

    bus: SteerBus
    registry: SessionRegistry
    workspace: Path
    data_dir: Path
    events: RecordingEvents = field(default_factory=RecordingEvents)
    clock: FakeClock = field(default_factory=FakeClock)
    session_id: str = ""
    idle_wait: float = 0.0
    lease_seconds: float = 30.0

    def create(self, workflow_id: str = "two-step", workspace: Path | None = None) -> str:
        self.session_id = self.registry.create(
            NewSession(
                workflowId=workflow_id,
                goal="understand the workspace",
                workspacePath=str(workspace or self.workspace),
                stepCount=2,
                firstStepId="look",
            )
        )
        return self.session_id

    def services(
        self,
        model: ScriptedModel,
        worker_id: str = "w1",
        extra: Workflow | None = None,
        calls: CallSettings | None = None,
    ) -> WorkerServices:
        catalog = CATALOG
        if extra is not None:
            catalog = type(CATALOG)({**CATALOG.workflows, extra.id: extra})
        return WorkerServices(
            bus=self.bus,
            registry=self.registry,
            events=self.events,
            issues=IssueSink(self.bus.client, self.bus.keys, self.data_dir),
            catalog=catalog,
            make_model=lambda _limits: model,
            worker_id=worker_id,
            lease_seconds=self.lease_seconds,
            idle_wait_seconds=self.idle_wait,
            clock=self.clock,
            calls=calls or CallSettings(),
        )

    def run(self, model: ScriptedModel, **kwargs: Any) -> str:
        return run_session(self.session_id, self.services(model, **kwargs))

    def history(self) -> list[Message]:
        return [
            parse_message(raw)
            for raw in self.bus.client.lrange(self.bus.keys.session(self.session_id).history, 0, -1)
        ]

    def record(self) -> Any:
        return self.registry.get(self.session_id)


@pytest.fixture
def harness(bus: SteerBus, registry: SessionRegistry, tmp_path: Path) -> Harness:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "README.md").write_text("# Demo project\n")
    events = RecordingEvents(EventSink(bus.client, bus.keys, None))
    return Harness(bus, registry, workspace, tmp_path / "data", events=events)


def make_worktree(repo: Path, session_id: str, branch: str, base_ref: str = "HEAD") -> Made:
    """A session repository in `repo`, made as the worker makes it (checkout in the box)."""
    return ensure_worktree(main_repository(repo), session_id, branch, base_ref, boxes)


def last_user_blocks(message: Message) -> list[tuple[str, str]]:
    """(type, text-ish) of each block: tool results by content, text by text."""
    out = []
    for block in message.content:
        out.append((block.type, getattr(block, "text", None) or getattr(block, "content", "")))
    return out


class NoIssues:
    def record(self, issue: Any) -> None:
        pass


@pytest.fixture
def workspace_ctx(tmp_path: Path) -> ToolContext:
    """A tool context on an empty workspace `<tmp>/ws` (the Read/Write/Bash tests)."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return ToolContext("sess_01JD0000000000000000000000", 1, workspace, WorkflowCursor(TWO_STEP),
                       RecordingEvents(), NoIssues())  # fmt: skip


def call_tool(ctx: ToolContext, name: str, **tool_input: Any) -> tuple[str, bool]:
    """Run one tool call through the default toolbox: (the result's text, is_error)."""
    result = default_toolbox().run(ToolUseBlock(id="t1", name=name, input=tool_input), ctx)
    return result.content, result.is_error
