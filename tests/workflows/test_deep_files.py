"""A workflow file nested 100,000 deep stopped `worktrain web` (issue 21, L6: RecursionError
in json.loads): it is one skipped file with its reason, like any other bad file."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from daemon.host.config import Settings
from daemon.workflows.catalog import MAX_JSON_DEPTH, json_depth, load_catalog
from tests.web.conftest import FIXTURE_WORKFLOWS
from web.serve import build_app

pytestmark = pytest.mark.unit


def deep_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "workflows"
    shutil.copytree(FIXTURE_WORKFLOWS, folder)
    (folder / "deep.json").write_text('{"id": "deep", "steps": ' + "[" * 100_000 + "]" * 100_000 + "}")
    (folder / "deep-in-strings.json").write_text('{"id": "' + "[" * 5000 + '"}')  # brackets in a string
    (folder / "just-over.json").write_text('{"a": ' + "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH + "}")
    return folder


def test_a_deep_file_is_skipped_with_its_reason_and_the_rest_loads(tmp_path: Path) -> None:
    catalog = load_catalog(deep_folder(tmp_path))
    assert "two-step" in catalog.workflows and "deep" not in catalog.workflows
    reasons = dict(catalog.problems)
    assert reasons["deep.json"] == f"nested 100001 levels deep; at most {MAX_JSON_DEPTH} are read"
    assert reasons["just-over.json"].startswith(f"nested {MAX_JSON_DEPTH + 1} levels deep")
    assert "nested" not in reasons["deep-in-strings.json"]  # invalid for another reason


def test_worktrain_webs_app_starts_and_lists_the_skipped_file(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", workflows_dir=deep_folder(tmp_path))
    app = build_app(settings, standalone=True)
    data = app.test_client().get("/api/v2/workflows").get_json()["data"]
    assert {
        "file": "deep.json",
        "reason": f"nested 100001 levels deep; at most {MAX_JSON_DEPTH} are read",
    } in data["skipped"]
    assert "two-step" in [w["id"] for w in data["workflows"]]


def test_json_depth_ignores_brackets_in_strings() -> None:
    assert json_depth(b'{"a": [1, {"b": "[[[[\\"]]"}]}') == 3
    assert json_depth(b"[]") == 1 and json_depth(b'"x"') == 0
