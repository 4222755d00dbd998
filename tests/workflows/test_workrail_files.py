"""WorkRail's own 48 files (the repository's copy, tests/fixtures/workrail/workflows): each
loads, runs to completion in the engine, and the confirmed example sequences come out as
WorkRail presents them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from daemon.workflows import Catalog, load_catalog
from daemon.workflows.engine import Advanced, advance, present, start
from tests.workflows.helpers import Walk
from tests.workflows.samples import WORKRAIL, output_for, workrail_folder

pytestmark = pytest.mark.unit

FILES_EXPECTED = 48
CALL_LIMIT = 400


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog(workrail_folder())


def file_ids() -> dict[str, str]:
    folder = WORKRAIL / "workflows"
    return {f"workflows/{p.name}": json.loads(p.read_text())["id"] for p in sorted(folder.glob("*.json"))}


def examples() -> list[dict[str, Any]]:
    path = WORKRAIL / "examples.json"
    examples: list[dict[str, Any]] = json.loads(path.read_text())
    return examples


def test_all_48_files_load(catalog: Catalog) -> None:
    ids = file_ids()
    assert len(ids) == FILES_EXPECTED
    assert catalog.problems == {}, catalog.problems  # nothing skipped: WorkRail starts 47, WorkTrain all 48
    assert set(ids.values()) <= set(catalog.workflows)


@pytest.mark.parametrize("workflow_file", sorted(file_ids()) or ["(absent)"])
def test_every_file_runs_to_completion_in_the_engine(catalog: Catalog, workflow_file: str) -> None:
    workflow = catalog.compiled(file_ids()[workflow_file])
    assert workflow is not None
    state = start(workflow, {"goal": "g"})
    presented = []
    for _ in range(CALL_LIMIT):
        shown = present(workflow, state)
        if shown is None:
            break
        assert "[unset: wr." not in shown.prompt and shown.title
        presented.append(shown.step_id)
        result = advance(workflow, state, output_for(workflow, state))
        assert isinstance(result, Advanced), (shown.step_id, result)
        state = result.state
    assert state.complete, f"{workflow_file}: not complete after {CALL_LIMIT} calls"
    assert presented[0] == workflow.steps[0].id  # none of the 48 starts with a loop


@pytest.mark.parametrize("example", examples() or [{"id": "(absent)"}], ids=lambda e: e["id"])
def test_the_confirmed_example_sequences(catalog: Catalog, example: dict[str, Any]) -> None:
    workflow = catalog.compiled(file_ids()[example["workflowFile"]])
    assert workflow is not None
    walk = Walk(workflow, {"goal": "g"})
    titles = []
    artifacts = example.get("artifacts") or [None] * len(example["contexts"])
    for context, sent in zip(example["contexts"], artifacts, strict=True):
        shown = present(workflow, walk.state)
        assert shown is not None
        titles.append(shown.title)
        assert isinstance(walk.call(context=context, artifacts=sent or []), Advanced)
    assert walk.seen[:-1] == example["expectedStepIds"] and walk.seen[-1] == "<complete>"
    assert titles == example["expectedTitles"]


def test_the_repositorys_own_copy_is_where_the_tests_look() -> None:
    assert Path(__file__).resolve().parents[1] / "fixtures" / "workrail" == WORKRAIL
    assert len(list((WORKRAIL / "workflows").glob("*.json"))) == FILES_EXPECTED
    assert examples(), "the example sequences are there: the example tests never skip"
