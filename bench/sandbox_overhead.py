"""What the sandbox of docs/security.md adds to one Bash command (issue 21), side by side.

    .venv/bin/python bench/sandbox_overhead.py [--rounds 40] [--command true]

Runs `--command` in a fresh workspace, alternating, `--rounds` times each:
- `pid namespace only`: the command line of before issue 21 (`unshare --pid --fork
  --mount-proc --kill-child`, the data dir's cover, `bash -c`), no launcher;
- `every layer`: the Bash tool's `run_command` as it is now (the same namespace plus its
  own IPC and network namespaces, the Python launcher's rlimits, Landlock ruleset,
  capability drop, `no_new_privs` and seccomp filter, the private TMPDIR made and removed).
Printed: the median and p90 wall time of each, and the ratio of the medians.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, machine_line, median, table

sys.path.insert(0, str(ROOT))

from daemon.sandbox import namespaces, report
from daemon.tools.bash import run_command


def p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--command", default="true")
    args = parser.parse_args(argv)
    layers = report.layers()
    mode = namespaces.isolation()[0]
    env = {"PATH": os.environ.get("PATH", os.defpath)}
    before: list[float] = []
    now: list[float] = []
    with tempfile.TemporaryDirectory(prefix="worktrain-bench-") as folder:
        workspace = Path(folder)
        for _ in range(args.rounds):
            started = time.perf_counter()
            subprocess.run(namespaces.argv_for(mode, args.command, ()), cwd=workspace, env=env, check=False)
            before.append(time.perf_counter() - started)
            started = time.perf_counter()
            run_command(args.command, workspace, 60, env)
            now.append(time.perf_counter() - started)
    rows = [
        ["pid namespace only (before)", f"{median(before) * 1000:.1f}", f"{p90(before) * 1000:.1f}"],
        ["every layer (now)", f"{median(now) * 1000:.1f}", f"{p90(now) * 1000:.1f}"],
    ]
    text = "\n".join(
        [
            machine_line(),
            "layers: " + ", ".join(f"{name} {state}" for name, state in layers.items()),
            "",
            table(["`" + args.command + "`, " + str(args.rounds) + " rounds", "median ms", "p90 ms"], rows),
            "",
            f"ratio of the medians: {median(now) / max(median(before), 1e-9):.1f}x",
        ]
    )
    print(text)
    return text


if __name__ == "__main__":
    main()
