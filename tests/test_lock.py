"""requirements.lock pins what pyproject.toml asks for (issue 10: the image had picked up an
unpinned rq). The image, the run command and the test command all install with the lock as
pip constraints, so a dependency added to pyproject.toml without `./scripts/lock` would be
installed unpinned: this test names it."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
LOCK_LINE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)")


def locked() -> dict[str, Version]:
    pins = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        match = LOCK_LINE.match(line)
        if match:
            pins[canonicalize_name(match[1])] = Version(match[2])
    return pins


def wanted() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        lines += extra
    return [Requirement(line) for line in lines]


def test_every_dependency_of_pyproject_is_pinned_by_the_lock() -> None:
    pins = locked()
    problems = []
    for requirement in wanted():
        name = canonicalize_name(requirement.name)
        if name not in pins:
            problems.append(f"{requirement} is not in requirements.lock")
        elif not requirement.specifier.contains(pins[name], prereleases=True):
            problems.append(f"{requirement} does not allow the locked {name}=={pins[name]}")
    assert not problems, (
        "pyproject.toml and requirements.lock disagree; run ./scripts/lock (it resolves from PyPI) "
        "and commit requirements.lock:\n  " + "\n  ".join(problems)
    )


def test_the_test_command_installed_the_locked_versions() -> None:
    pins = locked()
    drifted = []
    for requirement in wanted():
        name = canonicalize_name(requirement.name)
        try:
            installed = Version(version(requirement.name))
        except PackageNotFoundError:
            continue  # an extra this environment does not install (bench)
        if name in pins and installed != pins[name]:
            drifted.append(f"{name}: installed {installed}, locked {pins[name]}")
    assert not drifted, "the environment is not the lock's (./scripts/test installs it):\n  " + "\n  ".join(
        drifted
    )
