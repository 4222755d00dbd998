"""What confines one command (docs/security.md): the configuration, and the plan the launcher applies.

Pure except for listing a directory to carve a denied path out of a granted one. The worker
configures it once (`configure`, from daemon/host/config.py's settings); for each command
`plan_for(workspace, tmpdir, ...)` says which layers apply and with which rules, from what
this host offers (`Available`, probed once by daemon/sandbox/report.py). The launcher
(daemon/sandbox/launch.py) applies a plan and fails closed: a layer in the plan that does
not apply stops the command before it runs.

Landlock grants rights beneath a path and cannot take a subtree back out, so a denied path
(the data dir, the worker user's home, a few host secrets) under a granted one (`/etc`,
`/opt`, a workspace that is the home) is carved out by granting the siblings on its way
instead (`beneath`); symlinks met while carving are not granted (they point elsewhere, and
whatever they point at is granted or not on its own).
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path

from daemon.sandbox.launch import encode
from daemon.sandbox.network import DEFAULT_PORTS, NetworkMode
from daemon.sandbox.rlimits import DEFAULT_CPU_SECONDS, DEFAULT_FSIZE_MB, DEFAULT_MEMORY_MB, DEFAULT_NPROC

# What every command may read and run: the system (and the Python WorkTrain runs on).
SYSTEM_READ = (
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt",
    "/proc", "/sys", "/run/systemd/resolve", "/var/lib/ca-certificates",
)  # fmt: skip
# Devices a command may open for reading and writing (nothing else under /dev: as root,
# mode bits alone would let it open a disk).
DEVICES = (
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
)
# Host secrets root could read by their mode bits (no capability needed for a file it owns).
HOST_SECRETS = ("/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/sudoers")


def host_secrets() -> list[Path]:
    """HOST_SECRETS and the SSH host keys (the client's own /etc/ssh/ssh_config stays readable)."""
    return [*map(Path, HOST_SECRETS), *sorted(Path("/etc/ssh").glob("ssh_host_*_key"))]


@dataclass(frozen=True)
class Limits:
    """Each command's rlimits (daemon/sandbox/rlimits.py applies them)."""

    memory_mb: int = DEFAULT_MEMORY_MB
    nproc: int = DEFAULT_NPROC
    fsize_mb: int = DEFAULT_FSIZE_MB
    cpu_seconds: int = DEFAULT_CPU_SECONDS

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    def describe(self) -> str:
        return (
            f"memory {self.memory_mb} MiB, {self.nproc} processes, "
            f"files {self.fsize_mb} MiB, cpu {self.cpu_seconds} s"
        )


class Strictness(StrEnum):
    AUTO = "auto"  # run with what the host offers, say loudly what is missing
    REQUIRED = "required"  # refuse to run without every layer


@dataclass(frozen=True)
class SandboxConfig:
    """The worker's sandbox settings (WORKTRAIN_SANDBOX*), and what must stay out of reach."""

    strictness: Strictness = Strictness.AUTO
    network: NetworkMode = NetworkMode.NONE
    ports: tuple[int, ...] = DEFAULT_PORTS
    extra_read: tuple[Path, ...] = ()  # WORKTRAIN_SANDBOX_READ
    limits: Limits = field(default_factory=Limits)
    denied: tuple[Path, ...] = ()  # the data dir, the worker user's home (unless in extra_read)


@dataclass(frozen=True)
class Available:
    """What this host offers (report.probe): the namespace mode's name, Landlock's ABI, a net
    namespace, the seccomp filter."""

    namespaced: bool = False
    landlock_abi: int = 0
    netns: bool = False
    seccomp: bool = False


@dataclass(frozen=True)
class Plan:
    """Everything the launcher does before it runs the command (JSON across the exec)."""

    landlock_abi: int = 0  # 0: no Landlock rules
    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()
    connect_ports: tuple[int, ...] | None = None  # None: TCP not confined by Landlock
    loopback_up: bool = False  # in a network namespace of its own
    drop_caps: bool = True
    limits: dict[str, int] | None = None
    seccomp: bool = False  # the filter of daemon/sandbox/seccomp.py
    unix_sockets: bool = True  # False (network `none`): the filter refuses AF_UNIX sockets

    def encode(self) -> str:
        """The launcher's text form (daemon/sandbox/launch.py `decode`s it without json)."""
        fields: dict[str, list[str]] = {
            "landlock_abi": [str(self.landlock_abi)],
            "read": list(self.read),
            "write": list(self.write),
            "devices": list(self.devices),
            "loopback_up": ["1" if self.loopback_up else "0"],
            "drop_caps": ["1" if self.drop_caps else "0"],
            "seccomp": ["1" if self.seccomp else "0"],
            "unix_sockets": ["1" if self.unix_sockets else "0"],
        }
        if self.connect_ports is not None:
            fields["connect_ports"] = [str(port) for port in self.connect_ports]
            fields["confine_tcp"] = ["1"]
        if self.limits is not None:
            fields.update({f"limit_{name}": [str(value)] for name, value in self.limits.items()})
        return encode(fields)


_config = SandboxConfig()
_configured = False


def configure(config: SandboxConfig) -> None:
    """The sandbox settings of this process (set once, at the worker's start)."""
    global _config, _configured
    _config, _configured = config, True


def configured() -> bool:
    return _configured


def current() -> SandboxConfig:
    return _config


def default_denied(data_dir: Path, extra_read: Sequence[Path], home: Path | None = None) -> tuple[Path, ...]:
    """The data dir and the worker user's home (unless WORKTRAIN_SANDBOX_READ lists it)."""
    home = home or Path.home()
    denied = [Path(os.path.realpath(data_dir))]
    if not _home_listed(extra_read, home):
        denied.append(Path(os.path.realpath(home)))
    return tuple(denied)


def _home_listed(extra_read: Sequence[Path], home: Path) -> bool:
    """Whether WORKTRAIN_SANDBOX_READ lists the home itself (then its commands keep it)."""
    return Path(os.path.realpath(home)) in {Path(os.path.realpath(p)) for p in extra_read}


def beneath(
    root: Path, denied: Sequence[Path], listdir: Callable[[Path], list[str]] | None = None
) -> list[Path]:
    """`root`'s hierarchy minus every `denied` path, as the fewest paths to grant."""
    inside = [d for d in denied if d == root or root in d.parents]
    if not inside:
        return [root]
    if root in inside:
        return []
    listing = listdir or (lambda path: os.listdir(path))
    granted: list[Path] = []
    try:
        names = sorted(listing(root))
    except OSError:
        return []
    for name in names:
        child = root / name
        if os.path.islink(child):
            continue
        granted.extend(beneath(child, inside, listdir))
    return granted


def _existing_real(paths: Sequence[str | Path]) -> list[Path]:
    """Each path that exists and this user may open, resolved (a PATH entry of another user's
    is left out here: the launcher fails closed on a grant it cannot open)."""
    real = [Path(os.path.realpath(p)) for p in paths if os.path.exists(p) and os.access(p, os.R_OK)]
    return list(dict.fromkeys(real))


def _strictly_under(root: Path, denied: Sequence[Path]) -> list[Path]:
    """The denied paths inside `root` (a workspace that *is* the home is still granted; the
    worker refuses one that holds the data dir — daemon/sandbox/roots.py)."""
    return [d for d in denied if root in d.parents]


def tool_dirs(search_path: str) -> list[str]:
    """The folders of `PATH` (absolute ones); a version manager's `shims` folder (pyenv, rbenv,
    asdf: its scripts exec from the folder above) brings that folder in whole."""
    found = []
    for entry in search_path.split(os.pathsep):
        if os.path.isabs(entry):
            found.append(
                os.path.dirname(entry.rstrip("/"))
                if os.path.basename(entry.rstrip("/")) == "shims"
                else entry
            )
    return found


def system_read(config: SandboxConfig, search_path: str | None = None) -> list[Path]:
    """What every command may read and run: the system, the Python WorkTrain runs on, the
    tools on `PATH`, and WORKTRAIN_SANDBOX_READ."""
    tools = tool_dirs(os.environ.get("PATH", "") if search_path is None else search_path)
    return _existing_real([*SYSTEM_READ, sys.prefix, sys.base_prefix, *tools, *config.extra_read])


def _grants(roots: Sequence[Path], denied: Sequence[Path]) -> list[Path]:
    return [path for root in roots for path in beneath(root, denied)]


@functools.lru_cache(maxsize=8)
def _system_grants(config: SandboxConfig, search_path: str) -> tuple[Path, ...]:
    """The system's grants, carved: the same for every command of a worker (computed once)."""
    return tuple(_grants(system_read(config, search_path), [*config.denied, *host_secrets()]))


def plan_for(
    workspace: Path,
    tmpdir: Path,
    available: Available,
    config: SandboxConfig | None = None,
    read_only: bool = False,
    extra_read: Sequence[Path] = (),
    extra_write: Sequence[Path] = (),
) -> Plan:
    """The layers and rules for one command in `workspace` (`read_only`: nothing of it
    writable; `extra_read` / `extra_write`: more paths for this command, e.g. a worktree's
    git object store)."""
    config = config or _config
    denied = [*config.denied, *host_secrets()]
    workspace_real = Path(os.path.realpath(workspace))
    abi = available.landlock_abi
    read = [*_system_grants(config, os.environ.get("PATH", "")), *_grants(_existing_real(extra_read), denied)]
    write_roots = [tmpdir, *extra_write] + ([] if read_only else [workspace_real])
    write = [
        p for root in _existing_real(write_roots) for p in beneath(root, _strictly_under(root, config.denied))
    ]
    if read_only:
        read.extend(beneath(workspace_real, _strictly_under(workspace_real, config.denied)))
    egress = config.network is NetworkMode.EGRESS and abi >= 4
    return Plan(
        landlock_abi=abi,
        read=tuple(map(str, dict.fromkeys(read))),
        write=tuple(map(str, dict.fromkeys(write))),
        devices=tuple(map(str, _existing_real(DEVICES))),
        connect_ports=config.ports if egress else None,
        loopback_up=config.network is NetworkMode.NONE and available.netns,
        drop_caps=True,
        limits=config.limits.as_dict(),
        seccomp=available.seccomp,
        unix_sockets=config.network is not NetworkMode.NONE,
    )


def home_hidden(config: SandboxConfig | None = None) -> bool:
    """Whether the worker user's home is out of the commands' reach: not listed in
    WORKTRAIN_SANDBOX_READ, the rule `default_denied` applies. Decided from that list and
    today's home, not by finding the home in `denied`: a configuration made under another
    HOME (a process that changed it since) denied that one, so the real home was neither
    denied nor granted, and commands got HOME=/root that Landlock let them not read (git
    failed: "unable to access '/root/.gitconfig'")."""
    return not _home_listed((config or _config).extra_read, Path.home())


def command_env(env: dict[str, str], tmpdir: Path, landlocked: bool) -> dict[str, str]:
    """The command's environment: its private TMPDIR; with `landlocked` (Landlock on and the
    home out of reach) a HOME inside it too — tools that keep caches or settings there
    would fail on the real one."""
    out = {**env, "TMPDIR": str(tmpdir), "TMP": str(tmpdir), "TEMP": str(tmpdir)}
    if landlocked:
        home = tmpdir / "home"
        home.mkdir(mode=0o700, exist_ok=True)
        out["HOME"] = str(home)
    return out
