"""The launcher: the first thing run inside a command's namespaces, the last before its shell.

`python -I -S -c <bootstrap> PLAN_JSON -- /bin/bash -c COMMAND` (daemon/sandbox/namespaces.py
builds that line; `-I -S`: no environment variable, user site or current directory can put a
module of the workspace in front of ours). In order: bring the namespace's loopback up, set
the rlimits, build and enforce the Landlock ruleset, drop every capability and set
`no_new_privs`, then `execv` the shell — so the command and everything it starts inherit all
of it, and nothing of the launcher stays. Any layer of the plan that fails stops here with
exit code 125 and says which: the command never runs less confined than planned.

Imports only the standard library and its sibling layer modules (no pydantic, no daemon
package beyond daemon/sandbox): it starts in a few tens of milliseconds.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TypeVar

from daemon.sandbox import caps, landlock, network, rlimits
from daemon.sandbox.policy import DEVICE_RIGHTS, Plan

T = TypeVar("T")

REFUSED = 125


def apply(plan: Plan) -> None:
    """Every layer of `plan` on this process, or an exception naming the one that failed."""
    if plan.loopback_up:
        _step("loopback", network.loopback_up)
    if plan.limits is not None:
        limits = rlimits.Limits(**plan.limits)
        _step("rlimits", lambda: rlimits.apply(limits))
    ruleset = _step("landlock", lambda: _ruleset(plan)) if plan.landlock_abi else None
    _step("capabilities", caps.drop_all if plan.drop_caps else caps.set_no_new_privs)
    if ruleset is not None:
        _step("landlock", ruleset.restrict)


def _ruleset(plan: Plan) -> landlock.Ruleset:
    ruleset = landlock.Ruleset(plan.landlock_abi, network=plan.connect_ports is not None)
    for path in plan.read:
        ruleset.allow_path(path, landlock.READ)
    for path in plan.write:
        ruleset.allow_path(path, landlock.WRITE_ALL)
    for path in plan.devices:
        ruleset.allow_path(path, DEVICE_RIGHTS)
    if plan.connect_ports is not None:
        ruleset.allow_port(0, landlock.BIND_TCP)  # an ephemeral port, never a chosen one
        for port in plan.connect_ports:
            ruleset.allow_port(port, landlock.CONNECT_TCP)
    return ruleset


class LayerFailed(RuntimeError):
    pass


def _step(name: str, action: Callable[[], T]) -> T:
    try:
        return action()
    except OSError as exc:
        raise LayerFailed(f"{name}: {exc}") from exc


def main(argv: list[str]) -> None:
    if len(argv) < 3 or argv[1] != "--":
        sys.stderr.write("usage: launch PLAN_JSON -- PROGRAM [ARG...]\n")
        os._exit(2)
    try:
        apply(Plan.from_json(argv[0]))
    except LayerFailed as exc:
        sys.stderr.write(f"worktrain: the sandbox could not apply {exc}; the command did not run\n")
        sys.stderr.flush()
        os._exit(REFUSED)
    os.execv(argv[2], argv[2:])


def bootstrap_code(root: str) -> str:
    """The `-c` program that imports this module from WorkTrain's own tree and runs `main`."""
    return (
        f"import sys; sys.path.insert(0, {root!r}); "
        "from daemon.sandbox.launch import main; main(sys.argv[1:])"
    )
