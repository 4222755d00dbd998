"""Dispatch's workspace fields (README's Coding sessions): validated, kept on the record, served by
GET /sessions/<id>, and described by the OpenAPI document."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.web.conftest import Web, error_of

pytestmark = pytest.mark.unit


def git_repo(folder: Path) -> str:
    subprocess.run(["git", "init", "-q", str(folder)], check=True)
    return str(folder)


@pytest.mark.processes
def test_the_workspace_fields_reach_the_record(web: Web, tmp_path_factory: pytest.TempPathFactory) -> None:
    fields = {"branchStrategy": "worktree", "delivery": "push", "baseRef": "origin/main", "branch": "fix/x-1"}
    response = web.dispatch(
        **fields, keepWorktree=True, workspacePath=git_repo(tmp_path_factory.mktemp("repo"))
    )
    assert response.status_code == 202, response.get_json()
    sid = response.get_json()["data"]["sessionId"]
    data = web.http.get(f"/api/v2/sessions/{sid}").get_json()["data"]
    assert (data["branchStrategy"], data["deliveryMode"], data["baseRef"], data["branch"]) == (
        "worktree", "push", "origin/main", "fix/x-1",
    )  # fmt: skip
    assert data["keepWorktree"] is True and data["delivery"] is None
    assert "readFiles" not in data  # the worker's own


def test_the_defaults(web: Web) -> None:
    sid = web.dispatch().get_json()["data"]["sessionId"]
    data = web.http.get(f"/api/v2/sessions/{sid}").get_json()["data"]
    assert (data["branchStrategy"], data["deliveryMode"], data["baseRef"], data["keepWorktree"]) == (
        "none", "commit", None, False,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("branchStrategy", "sideways"),
        ("delivery", "email"),
        ("branch", "--force"),
        ("branch", "a..b"),
        ("branch", "ends/"),
        ("baseRef", "-x"),
        ("baseRef", "HEAD..main"),
        ("keepWorktree", "yes"),
    ],
)
def test_bad_workspace_fields_are_refused_with_a_hint(web: Web, field: str, value: str) -> None:
    response = web.dispatch(**{field: value})
    assert error_of(response) == (400, "invalid_request")
    assert field in response.get_json()["error"]


def test_the_openapi_document_has_the_dispatch_fields(web: Web) -> None:
    document = web.http.get("/api/v2/openapi.json").get_json()
    body = document["components"]["schemas"]["DispatchBody"]["properties"]
    assert set(body) >= {"branchStrategy", "delivery", "baseRef", "branch", "keepWorktree"}
    assert body["branchStrategy"]["enum"] == ["none", "read-only", "worktree"]
    # GET /sessions/<id> answers the record with its children (SessionDetail extends SessionRecord)
    record = document["components"]["schemas"]["SessionDetail"]["properties"]
    assert {"branchStrategy", "deliveryMode", "delivery"} <= set(record)


@pytest.mark.processes
def test_a_worktree_dispatch_on_a_folder_in_no_repository_is_refused(
    web: Web, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Issue 33: refused at dispatch, not queued to fail `workspace_error` on the worker."""
    plain = tmp_path_factory.mktemp("plain")
    response = web.dispatch(branchStrategy="worktree", workspacePath=str(plain))
    assert error_of(response) == (400, "workspace_not_a_repository"), response.get_json()
    assert "git init" in response.get_json()["error"]
    assert web.http.get("/api/v2/sessions").get_json()["data"]["totalCount"] == 0
    # without a worktree the same folder is fine; a path this host lacks is the worker's to judge
    assert web.dispatch(workspacePath=str(plain)).status_code == 202
    elsewhere = web.dispatch(branchStrategy="worktree", workspacePath=str(plain / "on-another-host"))
    assert elsewhere.status_code == 202
