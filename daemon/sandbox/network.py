"""The network a command reaches (docs/security.md, `WORKTRAIN_SANDBOX_NETWORK`).

- `none` (the default): a network namespace of its own (`unshare --net`, in
  daemon/sandbox/namespaces.py) whose only interface is its own loopback, brought up by
  the launcher (daemon/sandbox/loopback.py): a
  command can start a server and test it, and reaches nothing else — not WorkTrain's web
  port, not Redis, not another session's server, not the internet.
- `egress`: the host's network, but TCP through Landlock's network rules (ABI >= 4):
  `connect` only to `WORKTRAIN_SANDBOX_PORTS` (default 22, 80, 443, 9418), `bind` only an
  ephemeral port (port 0). The worker refuses to start when its Redis or web port is in
  that list (`check_ports`). UDP is not covered by Landlock before ABI 10 (DNS works).
- `host`: unconfined; said to be unsafe wherever the layers are shown.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

DEFAULT_PORTS = (22, 80, 443, 9418)


class NetworkMode(StrEnum):
    NONE = "none"
    EGRESS = "egress"
    HOST = "host"

    @property
    def strictness(self) -> int:
        return {NetworkMode.NONE: 2, NetworkMode.EGRESS: 1, NetworkMode.HOST: 0}[self]


def stricter(worker: NetworkMode, requested: NetworkMode | None) -> NetworkMode:
    """A dispatch may ask for a stricter mode than the worker's, never a looser one."""
    if requested is None or requested.strictness <= worker.strictness:
        return worker
    return requested


def parse_ports(text: str) -> tuple[int, ...]:
    """`"22,80,443"` -> (22, 80, 443); ValueError names a port that is not one."""
    ports = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        port = int(part)
        if not 1 <= port <= 65535:
            raise ValueError(f"{port} is not a TCP port")
        ports.append(port)
    return tuple(dict.fromkeys(ports))


def check_ports(allowed: Iterable[int], own: dict[str, int | None]) -> str | None:
    """Why `egress` with `allowed` would let a command reach WorkTrain itself (None: it would not).
    `own` names WorkTrain's ports, e.g. {"Redis": 6390, "web": 3456}."""
    clash = [f"{name} port {port}" for name, port in own.items() if port is not None and port in set(allowed)]
    if not clash:
        return None
    return (
        f"WORKTRAIN_SANDBOX_PORTS lets agent commands connect to WorkTrain's own {', '.join(clash)}; "
        "remove it from the list (or use WORKTRAIN_SANDBOX_NETWORK=none)"
    )
