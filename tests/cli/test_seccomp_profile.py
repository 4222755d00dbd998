"""docker/worker-seccomp.json: Docker's default seccomp profile plus exactly what the sandbox
needs to build an agent command's namespaces (docs/security.md, "Containers").

Its first part is moby's `profiles/seccomp/default.json` unchanged (github.com/moby/profiles
at MOBY_PROFILES_COMMIT: the digest below is of its canonical JSON, so a reviewer can fetch it
and compare); its last rule is WorkTrain's. tests/e2e/test_compose_e2e.py runs the workers
under it and checks every layer is on.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.unit

PROFILE = Path(__file__).resolve().parents[2] / "docker" / "worker-seccomp.json"
MOBY_PROFILES_COMMIT = "cd3bed8061c7b7378b61fc6827c7885779417a75"
MOBY_DEFAULT_SHA256 = "9da637d2ab0a204fcbd91bd88f1be9e004a3acab61c571a9f5b8870e588a17d2"
# unshare(1): unshare; its --mount-proc and propagation: mount; mount(8) of util-linux 2.39+
# (Debian trixie, the base of today's python:3.11-slim): the fd-based mount API
ADDED = {"unshare", "mount", "fsopen", "fsconfig", "fsmount", "open_tree", "move_mount", "mount_setattr"}


def canonical(profile: dict[str, Any]) -> bytes:
    return json.dumps(profile, sort_keys=True, separators=(",", ":")).encode()


def test_the_profile_is_dockers_default_and_one_rule_of_worktrain() -> None:
    profile = json.loads(PROFILE.read_text())
    rule = profile["syscalls"].pop()
    assert hashlib.sha256(canonical(profile)).hexdigest() == MOBY_DEFAULT_SHA256
    assert set(rule) == {"comment", "names", "action"}  # unconditional, no args, no caps
    assert rule["action"] == "SCMP_ACT_ALLOW" and set(rule["names"]) == ADDED
    assert "WorkTrain" in rule["comment"]


def test_what_the_default_keeps_refused_stays_refused() -> None:
    """The namespace calls the sandbox does not use are still allowed only with
    CAP_SYS_ADMIN (which the container lacks), as in Docker's default."""
    profile = json.loads(PROFILE.read_text())
    unconditional = {
        name
        for rule in profile["syscalls"]
        if rule["action"] == "SCMP_ACT_ALLOW" and not rule.get("args") and not rule.get("includes")
        for name in rule["names"]
    }
    for name in ("setns", "umount", "umount2", "pivot_root", "clone3", "fspick", "bpf", "ptrace", "keyctl"):
        assert name not in unconditional, name
    assert "clone" not in unconditional  # only without namespace flags (the default's masked rule)
