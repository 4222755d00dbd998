"""The console's Dispatch form with a branch strategy, and the session page's delivery (README's Coding
sessions): a worktree session dispatched from the page, delivered on its own branch."""

from __future__ import annotations

import re
import subprocess

import pytest
from playwright.sync_api import expect

from tests.console.conftest import Console, ConsoleStack

pytestmark = pytest.mark.e2e


def git(*args: str) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout.strip()


def test_dispatch_a_worktree_session_and_see_its_delivery(console: Console, stack: ConsoleStack) -> None:
    repo = stack.tmp / "repo-for-console"
    repo.mkdir()
    (repo / "README.md").write_text("# A repository\n")
    git("-C", str(repo), "init", "-q", "-b", "main")
    git("-C", str(repo), "add", "-A")
    git("-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "initial")
    page = console.goto("/dispatch")
    page.get_by_label("Workflow").select_option("two-step")
    page.get_by_label("Goal").fill("Look at the repository")
    page.get_by_label("Workspace").fill(str(repo))
    expect(page.get_by_label("Delivery")).to_be_disabled()  # worktree only
    page.get_by_label("Branch strategy").select_option("worktree")
    page.get_by_label("Delivery").select_option("commit")
    page.get_by_role("button", name="Dispatch").click()
    expect(page).to_have_url(re.compile(r"/sessions/sess_[0-9A-HJKMNP-TV-Z]{26}$"))
    session_id = page.url.rsplit("/", 1)[1]
    record = stack.session(session_id)
    assert (record["branchStrategy"], record["deliveryMode"]) == ("worktree", "commit")
    expect(page.locator(".record .field-status")).to_have_text("completed")
    delivery = page.locator(".record .field-delivery")
    expect(delivery).to_contain_text("delivered")
    expect(delivery).to_contain_text(f"branch worktrain/{session_id}")
    expect(delivery).to_contain_text("not pushed")
    head = git("-C", str(repo), "rev-parse", f"worktrain/{session_id}")
    expect(delivery).to_contain_text(f"commit {head[:12]}")
    assert git("-C", str(repo), "status", "--porcelain") == ""
