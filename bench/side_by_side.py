"""bench/scale.py for two daemons side by side: a base commit's and this checkout's, alternated.

    .venv/bin/python bench/side_by_side.py --base 60b1fbd --pairs 2 -- --sessions 1000 \\
        --processes 8 --concurrency 125 --seconds 40 --latency 10 --interval 5 --target-ms 100

The base commit's tree is exported next to this one with this checkout's bench/ in it (as
bench/retry_overhead.py does), so both daemons are measured by the same bench code against
the same fake model. `--script scale_phases.py` runs bench/scale_phases.py instead (the same
run, with the worker processes' CPU by phase and Redis's commandstats after its report).
Each pair runs both, alternating which goes first; each run's full output is kept
(`--out`), and a table of the figures that matter for issue 32 is printed:
calls/s (of the ideal), daemon CPU per model call (workers), the turnaround p50/p99 (a
reply's last byte written → the session's next request), the steer-to-model p99 after the
turn end, exactly-once, and the load average at the start of each run.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import FAKE_ROOT_ENV, ROOT, machine_line, median, table
from retry_overhead import export

FIGURES = {
    "calls/s": (r"Model calls in the window: \d+ \(([\d.]+)/s", 1),
    "of ideal": (r"; ([\d.]+) of one per", 1),
    "CPU/call ms": (r"Daemon CPU per model call: ([\d.]+) ms", 1),
    "workers ms": (r"\(workers ([\d.]+) ms\)", 1),
    "turnaround p50": (r"\| turnaround: reply written → next request arrives \| \d+ \| ([\d.]+) \|", 1),
    "turnaround p99": (
        r"\| turnaround: reply written → next request arrives \| \d+ \| [\d.]+ \| [\d.]+ \| ([\d.]+) \|",
        1,
    ),
    "turn end → request p99": (
        r"\| turn end → model request arrives \(the target\) \| \d+ \| [\d.]+ \| [\d.]+ \| ([\d.]+) \|",
        1,
    ),
}


def figures(output: str) -> dict[str, float]:
    found = {}
    for name, (pattern, group) in FIGURES.items():
        match = re.search(pattern, output)
        found[name] = float(match.group(group)) if match else float("nan")
    return found


def wait_for_quiet(below: float, at_most: float) -> float:
    """The 1-minute load average once it is under `below` (or after `at_most` seconds)."""
    deadline = time.monotonic() + at_most
    while os.getloadavg()[0] >= below and time.monotonic() < deadline:
        time.sleep(5)
    return os.getloadavg()[0]


def run_one(
    tree: Path, args: list[str], out: Path, script: str = "scale.py", quiet: float = 0.0
) -> tuple[dict[str, float], str, str]:
    load = wait_for_quiet(quiet, 600) if quiet else os.getloadavg()[0]
    env = {**os.environ, FAKE_ROOT_ENV: str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(tree / "bench" / script), *args],
        capture_output=True,
        text=True,
        cwd=tree,
        env=env,
    )
    out.write_text(done.stdout + "\n--- stderr\n" + done.stderr)
    once = "yes" if "0 missing, 0 more than once" in done.stdout and " 0 undelivered" in done.stdout else "NO"
    return figures(done.stdout), once, f"{load:.1f}"


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    ours, scale_args = (
        (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    )
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", default="60b1fbd")
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None, help="keep each run's output here")
    parser.add_argument("--script", default="scale.py", help="scale.py, or scale_phases.py (CPU by phase)")
    parser.add_argument(
        "--quiet-below", type=float, default=0.0,
        help="before each run, wait (up to 10 min) for the 1-minute load average to fall under this",
    )  # fmt: skip
    args = parser.parse_args(ours)
    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="wt-side-"))
    out = args.out or tmp
    out.mkdir(parents=True, exist_ok=True)
    trees = {"base": export(args.base, tmp), "this": ROOT}
    rows: list[list[object]] = []
    results: dict[str, list[dict[str, float]]] = {"base": [], "this": []}
    for pair in range(args.pairs):
        for name in ("base", "this") if pair % 2 == 0 else ("this", "base"):
            found, once, load = run_one(
                trees[name], scale_args, out / f"{name}-{pair + 1}.txt", args.script, args.quiet_below
            )
            results[name].append(found)
            rows.append([f"{name} ({args.base if name == 'base' else 'this branch'}) #{pair + 1}", load, once]
                        + [f"{v:.2f}" for v in found.values()])  # fmt: skip
            print(f"  {rows[-1]}", file=sys.stderr)
    for name in ("base", "this"):
        meds = [median([r[k] for r in results[name]]) for k in FIGURES]
        rows.append([f"**{name}, median**", "", ""] + [f"**{v:.2f}**" for v in meds])
    print(f"\n{machine_line()}\nscale.py {' '.join(scale_args)}\n")
    print(table(["run", "load", "exactly once", *FIGURES], rows))
    print(f"\noutputs in {out}; took {time.monotonic() - started:.0f}s")


if __name__ == "__main__":
    main()
