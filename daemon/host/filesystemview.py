"""Which files this process sees at which paths, as a string another process can compare.

A workspace is a path on the workers' filesystem (README, "Workers on other hosts"). The CLI
can check one before sending it only when it sees exactly what every worker sees: the same
kernel (`boot_id`), the same mount namespace, the same root. A loopback URL proves none of
that (a container's published port is on loopback too), so each worker publishes its view
(daemon/bus/fleet/workers.py) and the CLI compares it with its own (cli/workspace.py).

Two processes with the same view resolve every path to the same file. Different views
prove nothing either way (two containers may share a volume): the CLI then leaves the path
to the workers. "" where a part cannot be read (not Linux): it equals no view.
"""

from __future__ import annotations

import os
from pathlib import Path

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def filesystem_view() -> str:
    """`<boot_id>/<mount namespace>/<root's device:inode>`, or "" when one is unreadable."""
    try:
        boot = BOOT_ID.read_text().strip()
        mounts = os.readlink("/proc/self/ns/mnt")  # e.g. mnt:[4026531841], unique within a boot
        root = os.stat("/proc/self/root/")  # a chroot is another view in the same namespace
    except OSError:
        return ""
    return f"{boot}/{mounts}/{root.st_dev}:{root.st_ino}"
