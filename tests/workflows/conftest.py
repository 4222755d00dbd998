"""Real-process stacks for the workflow tests: redis-server, `worktrain web` and `worker`
processes (tests/crash/harness.py), with the fake model answering from a per-workflow rule."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from daemon.agent.model import ModelRequest
from daemon.fakemodel import continue_rule
from daemon.fakemodel.script import Answer, Rule
from tests.crash.harness import Stack, stacks
from tests.tiers import fixture_tier

WORKFLOW_LINE = re.compile(r"^- Workflow: .*\(([^()]+)\), \d+ step\(s\)$", re.MULTILINE)


def workflow_of(request: ModelRequest) -> str:
    match = WORKFLOW_LINE.search(request.system)
    assert match, "the system prompt names the workflow"
    return match.group(1)


class WorkflowStack(Stack):
    """A Stack whose fake model walks each workflow with the calls given for it."""

    def use_workflows(self, *files: Path, inline: Mapping[str, Any] | None = None) -> None:
        folder = self.tmp / "workflows"
        for path in files:
            (folder / path.name).write_bytes(path.read_bytes())
        for name, data in (inline or {}).items():
            (folder / f"{name}.json").write_text(json.dumps(data))

    def walk(self, calls: Mapping[str, list[dict[str, Any]]]) -> None:
        rules: dict[str, Rule] = {workflow_id: continue_rule(c) for workflow_id, c in calls.items()}

        def rule(request: ModelRequest) -> Answer:
            return rules[workflow_of(request)](request)

        self.model.server.script.rule = rule

    def dispatch_workflow(self, workflow_id: str, **body: Any) -> str:
        payload = {"workflowId": workflow_id, "goal": "g", "workspacePath": str(self.workspace), **body}
        answer = self.http("POST", "/api/v2/auto/dispatch", payload)
        assert answer.status == 202, answer
        return str(answer.body["data"]["sessionId"])

    def session(self, sid: str) -> dict[str, Any]:
        answer = self.http("GET", f"/api/v2/sessions/{sid}")
        assert answer.status == 200, answer
        return dict(answer.body["data"])


@pytest.fixture
@fixture_tier("e2e")
def make_workflow_stack(tmp_path: Path) -> Iterator[Callable[..., WorkflowStack]]:
    yield from stacks(tmp_path, WorkflowStack)
