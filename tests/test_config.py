"""Settings from the environment: defaults, `~` in paths, and a clear error for bad values."""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon.host.config import ConfigError, load_settings

pytestmark = pytest.mark.unit


def test_a_tilde_in_a_path_variable_means_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("WORKTRAIN_DATA_DIR", "~/wt")
    monkeypatch.setenv("WORKTRAIN_WORKFLOWS_DIR", "~/flows")
    settings = load_settings()
    assert (settings.data_dir, settings.workflows_dir) == (tmp_path / "wt", tmp_path / "flows")


@pytest.mark.parametrize("token", ["tökén", "two words ", "tab\there"])
def test_a_token_no_http_server_can_carry_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, token: str
) -> None:
    monkeypatch.setenv("WORKTRAIN_API_TOKEN", token)
    with pytest.raises(ConfigError, match=r"WORKTRAIN_API_TOKEN: .*printable ASCII"):
        load_settings()


def test_errors_name_the_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKTRAIN_PORT", "not-a-port")
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:1/0")
    with pytest.raises(ConfigError, match="WORKTRAIN_PORT: "):
        load_settings()
    monkeypatch.setenv("WORKTRAIN_PORT", "3456")
    monkeypatch.setenv("WORKTRAIN_API_TOKEN", "s3cret-Token_1")
    assert load_settings().api_token == "s3cret-Token_1"
