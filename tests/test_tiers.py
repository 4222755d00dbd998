"""The tiers of tests/tiers.py hold: a test without one (or with two) stops the collection
naming what to add, a fixture's tier raises its tests', and the guard of tests/tierguard.py
fails a unit test that spawns or connects (even when the code swallowed the refusal) and a
redis test that spawns. Each case runs in a pytest of its own, on files written here."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[1]
CONFTEST = """
from tests import tierguard, tiers


def pytest_configure(config):
    tiers.register(config)
    config.pluginmanager.register(tiers, "worktrain-tiers")
    config.pluginmanager.register(tierguard, "worktrain-tierguard")
    tierguard.install()
"""


def run_pytest(folder: Path, files: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    for name, text in {"conftest.py": CONFTEST, **files}.items():
        (folder / name).write_text(textwrap.dedent(text))
    # no plugin of the environment's (schemathesis, hypothesis, ...): pytest alone starts fast
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rA", *args]
    return subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=60)


def test_a_module_without_a_tier_stops_the_collection_saying_what_to_add(tmp_path: Path) -> None:
    done = run_pytest(tmp_path, {"test_new.py": "def test_x():\n    pass\n"})
    assert done.returncode != 0, done.stdout
    assert "ERROR collecting test_new.py" in done.stdout
    assert "test_new.py has tests without a tier" in done.stdout
    assert "pytestmark = pytest.mark.unit" in done.stdout
    assert "Interrupted: 1 error during collection" in done.stdout


def test_two_tiers_on_one_node_stop_the_collection(tmp_path: Path) -> None:
    module = """
        import pytest
        pytestmark = pytest.mark.unit

        @pytest.mark.redis
        @pytest.mark.e2e
        def test_x():
            pass
    """
    done = run_pytest(tmp_path, {"test_two.py": module})
    assert done.returncode != 0, done.stdout
    assert "test_two.py::test_x declares 2 tiers (redis, e2e): keep one" in done.stdout


FIXTURES = """
    import pytest
    from tests.tiers import fixture_tier

    pytestmark = pytest.mark.unit

    @pytest.fixture
    @fixture_tier("redis")
    def server():
        return "a socket"

    @pytest.fixture
    def client(server):
        return server

    @pytest.fixture(params=["real", "fake"])
    @fixture_tier({"real": "redis", "fake": "unit"})
    def either(request):
        return request.param

    def test_pure():
        pass

    def test_through_a_fixture(client):
        pass

    def test_both(either):
        pass

    @pytest.mark.e2e
    def test_declared_e2e():
        pass
"""


@pytest.mark.parametrize(
    ("selection", "selected"),
    [
        ("unit", ["test_pure", "test_both[fake]"]),
        ("redis", ["test_through_a_fixture", "test_both[real]"]),
        ("e2e", ["test_declared_e2e"]),
        ("not unit", ["test_through_a_fixture", "test_both[real]", "test_declared_e2e"]),
    ],
)
def test_minus_m_selects_by_the_tier_a_test_really_has(
    tmp_path: Path, selection: str, selected: list[str]
) -> None:
    done = run_pytest(tmp_path, {"test_fixtures.py": FIXTURES}, "-m", selection, "--collect-only")
    collected = [line.split("::", 1)[1] for line in done.stdout.splitlines() if "::" in line]
    assert sorted(collected) == sorted(selected), done.stdout


GUARDED = """
    import socket
    import subprocess
    import threading

    import pytest

    pytestmark = pytest.mark.unit

    def test_spawn_swallowed():
        try:
            subprocess.run(["true"])
        except Exception:
            pass

    def test_connect():
        socket.create_connection(("127.0.0.1", 9), timeout=1)

    def test_spawn_in_a_thread():
        thread = threading.Thread(target=lambda: subprocess.run(["true"]))
        thread.start()
        thread.join()

    def test_pure():
        assert sum([1, 2]) == 3

    @pytest.mark.redis
    def test_redis_connects():
        with socket.socket() as sock:
            sock.connect_ex(("127.0.0.1", 9))

    @pytest.mark.redis
    def test_redis_spawns():
        subprocess.run(["true"])

    @pytest.mark.processes
    def test_processes_spawn():
        subprocess.run(["true"], check=True)
"""


def test_the_guard_fails_what_a_tier_rules_out_and_nothing_else(tmp_path: Path) -> None:
    done = run_pytest(tmp_path, {"test_guarded.py": GUARDED})
    outcome = {
        line.split("::", 1)[1].split(" ", 1)[0]: line.split(" ", 1)[0]
        for line in done.stdout.splitlines()
        if line.startswith(("PASSED", "FAILED", "ERROR")) and "::" in line
    }
    assert outcome == {
        "test_spawn_swallowed": "FAILED",
        "test_connect": "FAILED",
        "test_spawn_in_a_thread": "FAILED",
        "test_pure": "PASSED",
        "test_redis_connects": "PASSED",
        "test_redis_spawns": "FAILED",
        "test_processes_spawn": "PASSED",
    }, done.stdout
    assert "a unit test started a process: ['true']" in done.stdout
    assert "a unit test connected a socket to ('127.0.0.1', 9)" in done.stdout
    assert "(in thread Thread-" in done.stdout
    assert "a redis test started a process: ['true']" in done.stdout
    assert "pytestmark = pytest.mark.processes` at the top of test_guarded.py" in done.stdout
    assert "pytestmark = pytest.mark.redis` at the top of test_guarded.py" in done.stdout
    assert "During handling" not in done.stdout
