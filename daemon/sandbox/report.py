"""Which layers of the sandbox are in force here (docs/security.md), proved by running one.

`setup(settings)` (the worker, at start): the configuration from the settings, the probe,
the log lines, and — with `WORKTRAIN_SANDBOX=required` — `SandboxUnavailable` when a layer
is missing, so the worker exits saying which. The probe runs a real command through the
real path (namespaces, launcher, every layer this host claims) and checks from inside it
what it got: pid 1 of its own namespace, no capability, `no_new_privs`, an IPC namespace
not the worker's, the seccomp filter, a file outside its grants unreadable, only its own
loopback. A layer that does not hold there is missing,
said with its reason, and left out of every command's plan.

`layers()` is the mapping layer -> state the banner of `worktrain up` and
`GET /api/v2/workers` show, e.g. {"pid_namespace": "on (root)", "landlock": "abi 7",
"capabilities": "dropped", "no_new_privs": "on", "ipc_namespace": "on", "seccomp": "on (56
calls refused, ...)", "network": "none (own loopback only)",
"rlimits": "memory 4096 MiB, ...", "mode": "auto"}; `missing(layers)` the names not in force.
"""

from __future__ import annotations

import functools
import logging
import os
import subprocess
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

from daemon.host.config import Settings
from daemon.sandbox import landlock, namespaces, policy, roots, seccomp
from daemon.sandbox.network import NetworkMode, check_ports, parse_ports
from daemon.sandbox.policy import Available, Limits, SandboxConfig, Strictness

log = logging.getLogger(__name__)
MISSING = "missing"
PROBE_TIMEOUT_SECONDS = 15.0
_PROBE_COMMAND = (
    'echo "pid=$$"; grep -E "^(CapEff|NoNewPrivs|Seccomp):" /proc/self/status;'
    ' echo "ipc=$(readlink /proc/self/ns/ipc)";'
    ' cat "$1" 2>/dev/null && echo landlock=open || echo landlock=denied;'
    ' echo "interfaces=$(tail -n +3 /proc/net/dev | wc -l)"'
)


class SandboxUnavailable(RuntimeError):
    """WORKTRAIN_SANDBOX=required and a layer is missing (or the configuration is unsafe)."""


@dataclass(frozen=True)
class Probe:
    """What the probe found: what commands get (`available`) and each layer's state."""

    available: Available
    layers: dict[str, str] = field(default_factory=dict)


def config_from(settings: Settings) -> SandboxConfig:
    """The sandbox configuration of docs/security.md from WORKTRAIN_SANDBOX* and the data dir."""
    extra = tuple(settings.sandbox_read)
    return SandboxConfig(
        strictness=Strictness(settings.sandbox),
        network=NetworkMode(settings.sandbox_network),
        ports=parse_ports(settings.sandbox_ports),
        extra_read=extra,
        limits=Limits(memory_mb=settings.sandbox_memory_mb),
        denied=policy.default_denied(settings.data_dir, extra),
    )


def own_ports(settings: Settings) -> dict[str, int | None]:
    from urllib.parse import urlparse

    redis = urlparse(settings.redis_url_or_default)
    return {"Redis": redis.port or 6379, "web": settings.port}


def _run_probe(mode: namespaces.Isolation, available: Available, config: SandboxConfig) -> str:
    """The probe command's output under `available` (raises RuntimeError with why it failed)."""
    with tempfile.TemporaryDirectory(prefix="worktrain-probe-") as folder:
        base = Path(folder)
        (base / "ws").mkdir()
        (base / "tmp").mkdir()
        outside = base / "outside"
        outside.write_text("outside\n")
        probed = replace(
            config, extra_read=(), network=NetworkMode.NONE if available.netns else NetworkMode.HOST
        )
        plan = policy.plan_for(base / "ws", base / "tmp", available, probed)
        argv = namespaces.argv_for(mode, _PROBE_COMMAND, (), plan=plan, net=plan.loopback_up)
        argv += ["worktrain-probe", str(outside)]
        try:
            done = subprocess.run(
                argv, cwd=base / "ws", stdin=subprocess.DEVNULL, capture_output=True,
                timeout=PROBE_TIMEOUT_SECONDS, env={"PATH": os.defpath},
            )  # fmt: skip
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise RuntimeError(str(exc)) from exc
    if done.returncode != 0:
        raise RuntimeError(done.stderr.decode(errors="replace").strip()[-300:] or f"exit {done.returncode}")
    return done.stdout.decode(errors="replace")


def _fields(output: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for line in output.splitlines():
        key, sep, value = line.replace(":\t", "=").partition("=")
        if sep:
            found[key.strip()] = value.strip()
    return found


def probe(config: SandboxConfig | None = None) -> Probe:
    """Try the best this host claims, dropping a layer at a time where a real command fails."""
    config = config or policy.current()
    mode, mode_why = namespaces.isolation()
    abi, abi_why = landlock.abi_version()
    if "no-landlock" in namespaces.forced_faults():
        abi, abi_why = 0, "forced by WORKTRAIN_SANDBOX_FAULT (a test)"
    filter_ok, filter_why = seccomp.supported()
    if "no-seccomp" in namespaces.forced_faults():
        filter_ok, filter_why = False, "forced by WORKTRAIN_SANDBOX_FAULT (a test)"
    want_net = mode.namespaced  # whether a network namespace works here, whatever the mode in use
    problems: dict[str, str] = {"seccomp": filter_why} if filter_why else {}
    best = Available(mode.namespaced, abi, want_net, filter_ok)  # then one layer less at a time
    candidates = [best]
    if want_net:
        candidates.append(replace(best, netns=False))
    if abi:
        candidates.append(replace(best, netns=False, landlock_abi=0))
    if filter_ok:
        candidates.append(Available(mode.namespaced, 0, False, False))
    output, available = "", Available(mode.namespaced, 0, False, False)
    for candidate in candidates:
        try:
            output, available = _run_probe(mode, candidate, config), candidate
            break
        except RuntimeError as exc:
            problems[_first_dropped(candidate)] = str(exc)
    seen = _fields(output)
    layers = {
        "mode": config.strictness.value,
        "pid_namespace": f"on ({mode.value})"
        if mode.namespaced and seen.get("pid") == "1"
        else f"{MISSING}: {mode_why or 'not the first process of its namespace'}",
        "landlock": _landlock_state(available, abi, abi_why, seen, problems),
        "capabilities": "dropped"
        if seen.get("CapEff") == "0000000000000000"
        else f"{MISSING}: CapEff {seen.get('CapEff', '?')}",
        "no_new_privs": "on" if seen.get("NoNewPrivs") == "1" else MISSING,
        "ipc_namespace": _ipc_state(mode, seen),
        "seccomp": _seccomp_state(config, available, seen, problems),
        "network": _network_state(config, available, abi, seen, problems),
        "rlimits": config.limits.describe() if output else MISSING,
    }  # fmt: skip
    return Probe(available, layers)


def _first_dropped(candidate: Available) -> str:
    """The layer the next candidate leaves out when this one fails."""
    if candidate.netns:
        return "netns"
    return "landlock" if candidate.landlock_abi else "seccomp" if candidate.seccomp else "probe"


def _ipc_state(mode: namespaces.Isolation, seen: dict[str, str]) -> str:
    try:
        host = os.readlink("/proc/self/ns/ipc")
    except OSError as exc:
        return f"{MISSING}: {exc.strerror}"
    if not mode.namespaced:
        return f"{MISSING}: no namespaces here"
    return "on" if seen.get("ipc", host) != host else f"{MISSING}: the command saw the host's"


def _seccomp_state(
    config: SandboxConfig, available: Available, seen: dict[str, str], problems: dict[str, str]
) -> str:
    if not available.seccomp:
        return f"{MISSING}: {problems.get('seccomp', 'the probe failed')}"
    if seen.get("Seccomp") != "2":
        return f"{MISSING}: the command ran without its filter (Seccomp {seen.get('Seccomp', '?')})"
    sockets = (
        "AF_UNIX, AF_VSOCK and datagram pairs refused"
        if config.network is NetworkMode.NONE
        else "AF_VSOCK refused, AF_UNIX allowed"
    )
    return f"on ({len(seccomp.refused_here())} calls refused, namespaced clone refused, {sockets})"


def _landlock_state(
    available: Available, abi: int, why: str, seen: dict[str, str], problems: dict[str, str]
) -> str:
    if not abi:
        return f"{MISSING}: {why}"
    if not available.landlock_abi:
        return f"{MISSING}: {problems.get('landlock', 'the probe failed')}"
    if seen.get("landlock") != "denied":
        return f"{MISSING}: a file outside the grants was readable"
    return f"abi {abi}"


def _network_state(
    config: SandboxConfig, available: Available, abi: int, seen: dict[str, str], problems: dict[str, str]
) -> str:
    if config.network is NetworkMode.HOST:
        return "host (UNSAFE: commands reach every port of this host, WorkTrain's included)"
    if config.network is NetworkMode.EGRESS:
        if available.landlock_abi < 4:
            return f"{MISSING}: egress needs Landlock ABI 4 (here: {abi}); commands use the host's network"
        return f"egress (TCP connect only to ports {','.join(map(str, config.ports))}; bind only ephemeral)"
    if available.netns and seen.get("interfaces") == "1":
        return "none (own loopback only)"
    return f"{MISSING}: {problems.get('netns', 'no network namespace here')}; commands use the host's network"


def missing(layers: dict[str, str]) -> set[str]:
    """The layers not in force (`host` networking counts: it is no network layer at all)."""
    return {
        name
        for name, state in layers.items()
        if state.startswith(MISSING) or (name == "network" and state.startswith("host"))
    }


_probed: Probe | None = None


def setup(settings: Settings) -> Probe:
    """Configure this process's sandbox from `settings`, probe it, log each layer; raise
    SandboxUnavailable when `WORKTRAIN_SANDBOX=required` and a layer is missing, or when
    egress would let commands reach WorkTrain's own ports."""
    global _probed
    try:
        config = config_from(settings)
    except ValueError as exc:
        raise SandboxUnavailable(f"WORKTRAIN_SANDBOX_PORTS: {exc}") from None
    if config.network is NetworkMode.EGRESS and (clash := check_ports(config.ports, own_ports(settings))):
        raise SandboxUnavailable(clash)
    policy.configure(config)
    roots.configure(roots.Roots(settings.data_dir, tuple(settings.workspace_roots)))
    _probed = probe(config)
    gaps = missing(_probed.layers)
    for name, state in _probed.layers.items():
        (log.warning if name in gaps else log.info)("sandbox %s: %s", name, state)
    if gaps and config.strictness is Strictness.REQUIRED:
        raise SandboxUnavailable(
            "WORKTRAIN_SANDBOX=required and these sandbox layers are missing: "
            + "; ".join(f"{name} ({_probed.layers[name]})" for name in sorted(gaps))
        )
    if gaps:
        log.warning(
            "agent commands run WITHOUT %s (see the lines above); set WORKTRAIN_SANDBOX=required "
            "to refuse to run like this", ", ".join(sorted(gaps))
        )  # fmt: skip
    return _probed


def current() -> Probe:
    """This process's probe (`setup`'s, else one probe of the current configuration)."""
    return _probed if _probed is not None else _default_probe()


@functools.cache
def _default_probe() -> Probe:
    if not policy.configured():  # a process the worker's `setup` did not run in (tests, tools)
        policy.configure(config_from(Settings()))
    return probe()


def layers() -> dict[str, str]:
    """Layer -> state for this process's commands (for `/api/v2/workers` and the banner)."""
    return dict(current().layers)


def banner_lines(found: dict[str, str]) -> list[str]:
    """`worktrain up`'s sandbox lines: the layers in force, then loudly each one missing."""
    gaps = missing(found)
    shown = [f"{name} {state}" for name, state in found.items() if name not in gaps | {"mode", "rlimits"}]
    lines = [f"  sandbox:    {', '.join(shown) or 'NO LAYER IN FORCE'}"]
    if "rlimits" in found and "rlimits" not in gaps:
        lines.append(f"              limits per command: {found['rlimits']}")
    lines += [f"  WARNING:    agent commands run without {name}: {found[name]}" for name in sorted(gaps)]
    return lines
