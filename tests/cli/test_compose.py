"""The structure of docker-compose.yml, its workers' seccomp profile and the Dockerfile.

What they run is exercised for real by tests/cli/test_e2e.py, which reads the web and
worker commands from the compose file, and on a Docker engine by
tests/e2e/test_compose_e2e.py (where one can run).
"""

from __future__ import annotations

import re

import pytest

from tests.cli.compose import COMPOSE_FILE, load_compose, service, service_command, service_environment

pytestmark = pytest.mark.unit

ROOT = COMPOSE_FILE.parent


def test_services_are_redis_web_worker_and_the_fake_model_profile():
    assert set(load_compose()["services"]) == {"redis", "web", "worker", "fakemodel"}
    fake = service("fakemodel")
    assert fake["profiles"] == ["fakemodel"] and "ports" not in fake  # reachable on the compose network only
    assert fake["command"][:3] == ["python", "-m", "daemon.fakemodel"]
    port = fake["command"][fake["command"].index("--port") + 1]
    example = (ROOT / ".env.example").read_text()
    assert f"# ANTHROPIC_BASE_URL=http://fakemodel:{port}" in example


def test_redis_is_7_with_aof_everysec_on_a_volume_and_a_password_in_no_argv():
    redis = service("redis")
    assert redis["image"] == "redis:7"
    assert redis["command"][:2] == ["sh", "-c"]
    script = redis["command"][2]
    first, config = script.split("\n", 1)
    # config on stdin, env dropped, through the image's entrypoint (it drops root for redis-server)
    assert first.startswith("exec env -u REDIS_PASSWORD docker-entrypoint.sh redis-server - ")
    assert "--appendonly yes --appendfsync everysec" in first
    assert 'requirepass "$$REDIS_PASSWORD"' in config  # $$: compose leaves the variable to the shell
    assert redis["environment"]["REDIS_PASSWORD"].startswith("${REDIS_PASSWORD:?")
    assert any(
        v.split(":")[1] == "/data" and v.split(":")[0] in load_compose()["volumes"] for v in redis["volumes"]
    )
    test = " ".join(redis["healthcheck"]["test"])
    assert "REDISCLI_AUTH=" in test and "redis-cli ping" in test and "PONG" in test


@pytest.mark.processes
def test_the_redis_command_script_runs_in_a_shell(tmp_path):
    """The compose shell script, run by sh with a stand-in entrypoint and redis-server: the
    password comes on stdin and is gone from its environment and arguments."""
    import subprocess

    fake = tmp_path / "redis-server"
    fake.write_text('#!/bin/sh\necho "argv: $*"; echo "env: ${REDIS_PASSWORD:-none}"; cat\n')
    fake.chmod(0o755)
    entrypoint = tmp_path / "docker-entrypoint.sh"  # the official one ends `exec "$@"` (as the user)
    entrypoint.write_text('#!/bin/sh\nexec "$@"\n')
    entrypoint.chmod(0o755)
    script = service("redis")["command"][2].replace("$$", "$")
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "REDIS_PASSWORD": "pw-123"}
    out = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, timeout=10).stdout
    assert "argv: - --appendonly yes --appendfsync everysec" in out and "pw-123" not in out.split("\n")[0]
    assert "env: none" in out and 'requirepass "pw-123"' in out


def test_web_serves_the_production_server_on_all_interfaces_port_3456():
    web = service("web")
    assert service_command("web")[:2] == ["worktrain", "web"]
    command = service_command("web")
    assert command[command.index("--bind") + 1] == "0.0.0.0"
    assert "--port" not in command or command[command.index("--port") + 1] == "3456"
    assert service_environment("web").get("WORKTRAIN_PORT", "3456") == "3456"
    # this host only (TLS proxy to expose it); 3456 unless .env names another port
    assert web["ports"] == ["127.0.0.1:${WORKTRAIN_HOST_PORT:-3456}:3456"]
    assert web["build"] == "."


def test_the_image_is_built_once():
    built = [name for name, spec in load_compose()["services"].items() if "build" in spec]
    assert built == ["web"] and "build" not in load_compose()["x-worktrain"]
    for name in ("worker", "fakemodel"):
        assert service(name)["image"] == service("web")["image"] and service(name)["pull_policy"] == "never"


def test_web_takes_its_token_from_dotenv_since_it_binds_0_0_0_0():
    for name in ("web", "worker"):
        env_file = service(name)["env_file"]
        assert env_file == ".env" or ".env" in env_file
    example = (ROOT / ".env.example").read_text()
    assert re.search(r"^WORKTRAIN_API_TOKEN=$", example, re.MULTILINE)  # shipped empty: no weak default
    assert re.search(r"^REDIS_PASSWORD=$", example, re.MULTILINE)
    assert service_environment("worker")["WORKTRAIN_API_TOKEN"] == ""  # workers never hold it
    assert ".env" in (ROOT / ".gitignore").read_text().split()
    assert ".env" in (ROOT / ".dockerignore").read_text().split()


def test_web_healthcheck_asks_readyz_with_python_stdlib():
    check = service("web")["healthcheck"]
    test = check["test"]
    assert test[0] == "CMD" and test[1] == "python"
    assert "http://127.0.0.1:3456/readyz" in test[-1]
    assert "urllib.request" in test[-1]
    compile(test[-1], "<healthcheck>", "exec")  # the one-liner is valid Python


def test_web_and_worker_wait_for_a_healthy_redis_and_share_only_redis_url():
    for name in ("web", "worker"):
        assert service(name)["depends_on"]["redis"]["condition"] == "service_healthy"
        env = service_environment(name)
        assert env["REDIS_URL"] == "redis://redis:6379/0"  # the password comes from .env, not the URL
        assert env["WORKTRAIN_DATA_DIR"] == "/data"


def test_worker_runs_two_replicas_of_the_worker_command():
    worker = service("worker")
    command = service_command("worker")
    assert command[:2] == ["worktrain", "worker"]
    assert int(command[command.index("--concurrency") + 1]) > 1  # many sessions per replica
    assert worker["deploy"]["replicas"] == 2
    assert worker["image"] == service("web")["image"]


def test_data_and_workspaces_volumes_are_shared_by_web_and_workers():
    volumes = load_compose()["volumes"]
    mounts = {
        name: {v.rpartition(":")[2]: v.rpartition(":")[0] for v in service(name)["volumes"]}
        for name in ("web", "worker")
    }
    for name in ("web", "worker"):
        assert mounts[name]["/data"] in volumes
        assert (
            mounts[name]["/workspaces"] == "${WORKTRAIN_WORKSPACES:-workspaces}"
        )  # a volume, or a host path
    assert "workspaces" in volumes
    assert mounts["web"] == mounts["worker"]
    assert mounts["web"]["/data"] != service("redis")["volumes"][0].split(":")[0]


def test_dockerfile_installs_the_package_on_python_3_11_slim_as_non_root():
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim\b", text, re.MULTILINE)
    assert re.search(r"^RUN pip install -c requirements\.lock \.$", text, re.MULTILINE)  # the lock's versions
    assert re.search(r"^COPY .*requirements\.lock", text, re.MULTILINE)
    user = re.findall(r"^USER (\S+)", text, re.MULTILINE)
    assert user and user[-1] not in ("root", "0")
    assert "EXPOSE 3456" in text
    for package in ("daemon", "web", "worker", "cli", "workflows"):
        assert re.search(rf"^COPY {package} ", text, re.MULTILINE), package


def test_dockerignore_keeps_the_venv_and_git_out_of_the_build_context():
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert ".venv" in ignored and ".git" in ignored


def test_sessions_may_work_in_the_workspaces_volume_and_nowhere_else():
    """Issue 47: without WORKTRAIN_WORKSPACE_ROOTS every dispatch to /workspaces/... was 400
    `workspace_not_allowed` (the default roots are the home and /tmp)."""
    for name in ("web", "worker"):
        mounted = {v.rpartition(":")[2] for v in service(name)["volumes"]}
        assert service_environment(name)["WORKTRAIN_WORKSPACE_ROOTS"] == "/workspaces" in mounted


def test_workers_run_the_whole_sandbox_or_refuse_to_start():
    worker = service("worker")
    assert service_environment("worker")["WORKTRAIN_SANDBOX"] == "required"
    options = worker["security_opt"]
    assert "seccomp=./docker/worker-seccomp.json" in options
    assert (ROOT / "docker" / "worker-seccomp.json").is_file()
    assert "systempaths=unconfined" in options and "apparmor=unconfined" in options
    assert not any(o in options for o in ("seccomp=unconfined", "seccomp:unconfined"))
    assert "privileged" not in worker and "cap_add" not in worker  # nothing beyond the profile
    for name in ("web", "redis", "fakemodel"):
        assert "security_opt" not in service(name)  # only the workers build namespaces


def test_every_service_has_a_healthcheck_and_comes_back_after_a_crash():
    for name in ("redis", "web", "worker", "fakemodel"):
        spec = service(name)
        assert spec["healthcheck"]["test"][0] in ("CMD", "CMD-SHELL"), name
        assert spec["restart"] == "unless-stopped", name
    assert service("worker")["healthcheck"]["test"] == ["CMD", "python", "-m", "worker.health"]
    fake = service("fakemodel")["healthcheck"]["test"][-1]
    port = service("fakemodel")["command"][service("fakemodel")["command"].index("--port") + 1]
    assert f"http://127.0.0.1:{port}/_fake/stats" in fake
    compile(fake, "<healthcheck>", "exec")


def test_the_fake_model_answers_slowly_enough_to_steer_by_hand_by_default():
    command = service("fakemodel")["command"]
    assert command[command.index("--latency") + 1] == "${WORKTRAIN_FAKE_LATENCY:-10}"
