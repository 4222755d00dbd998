"""Retry overhead when the API is healthy: today's daemon and this one, side by side.

    .venv/bin/python bench/retry_overhead.py [--base 67fb85c] [--pairs 7] [--turns 200]

The worker now owns retries, counts usage, estimates the request's size for compaction and
writes the reply's text into events (issue 11); none of it may cost a healthy turn anything
measurable. This command exports the `--base` commit's tree (`git archive`) next to this
one, puts this checkout's `bench/` into it (so both are measured by the same bench code,
against the same fake model: this checkout's, `WORKTRAIN_BENCH_FAKE_ROOT`), and runs
`bench/turn_overhead.py --runs 1` from each tree in turn, `--pairs` times, alternating which
goes first: a 200-turn daemon session against a bare loop of the same SDK calls, each with
its own redis-server and fake model. Printed: each tree's medians (overhead per turn =
daemon minus bare, the wall ratio, the daemon's gap between calls, its and the bare loop's
call times, the daemon's CPU per turn) and the ratios this/base.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import FAKE_ROOT_ENV, ROOT, machine_line, median, table

# turn_overhead.figures() columns
WALL_RATIO, OVERHEAD, PER_TURN_P50, GAP_P50, CALL_P50, BARE_CALL_P50, DAEMON_CPU = 2, 3, 4, 6, 7, 8, 9


def export(ref: str, into: Path) -> Path:
    """`ref`'s tree in `into`, with this checkout's bench/ in place of its own."""
    archive = into / "base.tar"
    with archive.open("wb") as out:
        subprocess.run(["git", "-C", str(ROOT), "archive", ref], stdout=out, check=True)
    tree = into / "base"
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    shutil.rmtree(tree / "bench")
    shutil.copytree(ROOT / "bench", tree / "bench", ignore=shutil.ignore_patterns("__pycache__"))
    return tree


def one(tree: Path, turns: int, out: Path) -> list[float]:
    """One turn_overhead run (after its own warm-up) of the daemon in `tree`."""
    command = [sys.executable, str(tree / "bench" / "turn_overhead.py"), "--turns", str(turns)]
    env = {**os.environ, FAKE_ROOT_ENV: str(ROOT)}  # both daemons against this checkout's fake
    subprocess.run(
        [*command, "--runs", "1", "--json", str(out)], check=True, capture_output=True, cwd=tree, env=env
    )
    [figures] = json.loads(out.read_text())
    return [float(x) for x in figures]


def main(argv: list[str] | None = None) -> dict[str, list[list[float]]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--base", default="67fb85c", help="the commit to compare with (main before issue 11 was merged)"
    )
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("--turns", type=int, default=200)
    args = parser.parse_args(argv)
    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="wt-retry-"))
    runs: dict[str, list[list[float]]] = {"base": [], "this": []}
    try:
        trees = {"base": export(args.base, tmp), "this": ROOT}
        for pair in range(args.pairs):
            order = ["base", "this"] if pair % 2 == 0 else ["this", "base"]
            for name in order:
                runs[name].append(one(trees[name], args.turns, tmp / f"{name}.json"))
            print(
                f"  pair {pair + 1}: overhead/turn base {runs['base'][-1][OVERHEAD] * 1000:.2f} ms, "
                f"this {runs['this'][-1][OVERHEAD] * 1000:.2f} ms",
                file=sys.stderr,
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n{machine_line()}\n")
    print(report(runs, args.base, args.turns))
    print(f"\ntook {time.monotonic() - started:.0f}s")
    return runs


def report(runs: dict[str, list[list[float]]], base: str, turns: int) -> str:
    columns = [
        ("daemon/bare wall", WALL_RATIO, 1.0, "{:.2f}"),
        ("overhead ms/turn", OVERHEAD, 1000.0, "{:.2f}"),
        ("per-turn p50 ms", PER_TURN_P50, 1000.0, "{:.2f}"),
        ("daemon gap p50 ms", GAP_P50, 1000.0, "{:.2f}"),
        ("daemon call p50 ms", CALL_P50, 1000.0, "{:.2f}"),
        ("bare call p50 ms", BARE_CALL_P50, 1000.0, "{:.2f}"),
        ("daemon CPU ms/turn", DAEMON_CPU, 1000.0, "{:.2f}"),
    ]
    medians = {
        name: [median([run[index] for run in runs[name]]) * scale for _, index, scale, _ in columns]
        for name in runs
    }
    rows = [
        [f"{name} ({base if name == 'base' else 'this branch'}), median of {len(runs[name])}"]
        + [fmt.format(value) for (_, _, _, fmt), value in zip(columns, medians[name], strict=True)]
        for name in ("base", "this")
    ]
    ratios = [
        this / base_value if base_value else float("nan")
        for this, base_value in zip(medians["this"], medians["base"], strict=True)
    ]
    rows.append(["**this / base**"] + [f"**{ratio:.2f}**" for ratio in ratios])
    return table([f"{turns} turns, healthy API", *(name for name, *_ in columns)], rows)


if __name__ == "__main__":
    main()
