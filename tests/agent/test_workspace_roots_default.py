"""Issue 29 item 12: `WORKTRAIN_WORKSPACE_ROOTS` unset means the worker user's home and
`/tmp` (docs/security.md), on the worker and at dispatch alike — no longer "anywhere but / and the
data dir"."""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon.sandbox import roots
from web.errors import ApiError
from web.workspaces import WorkspacePolicy

pytestmark = pytest.mark.unit


def test_the_worker_refuses_a_workspace_outside_the_home_and_tmp_by_default(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    unset = roots.Roots(tmp_path / "data", home=home)
    assert unset.allowed() == (home, Path("/tmp"))
    assert unset.refusal(home / "project") is None and unset.refusal(tmp_path / "ws") is None
    for outside in (Path("/usr/share"), Path("/etc"), Path("/var/lib")):
        assert "outside WORKTRAIN_WORKSPACE_ROOTS" in (unset.refusal(outside) or ""), outside
    listed = roots.Roots(tmp_path / "data", (Path("/usr"),), home=home)
    assert listed.refusal(Path("/usr/share")) is None and listed.refusal(home) is not None


def test_dispatch_refuses_a_workspace_outside_the_home_and_tmp_by_default(tmp_path: Path) -> None:
    policy = WorkspacePolicy.of((), tmp_path / "data")
    policy.check(str(tmp_path / "ws"))
    policy.check(str(Path.home() / "project"))
    with pytest.raises(ApiError) as refused:
        policy.check("/usr/share")
    assert refused.value.code == "workspace_not_allowed"
