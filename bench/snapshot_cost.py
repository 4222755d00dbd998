"""What a worktree session's per-turn snapshot costs (issue 44, README's "Fork a session").

    .venv/bin/python bench/snapshot_cost.py [--files 10000] [--turns 20] [--untracked 0]

A main repository of `--files` tracked files (100 folders, ~120 bytes each, one commit); a
session repository made in it as the worker makes one (its own repository borrowing the
main one's objects, checked out in the box); then `--turns` turns, each changing what an
agent's turn changes — one tracked file edited, one new untracked file — followed by the
snapshot exactly as the worker takes it (`take_snapshot`, in the session repository's box).
Printed: the median and p90 wall time of a snapshot, of the box alone (`true` in the same
box), and the bytes of git objects one snapshot adds (the loose objects' sizes on disk,
what `git count-objects` would count), against the worktree's own size (what a copy costs).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, machine_line, median, table

sys.path.insert(0, str(ROOT))

from daemon.sandbox import gitgrants
from daemon.session.gitbox import SandboxBox, boxes
from daemon.workspaces.snapshots import take_snapshot
from daemon.workspaces.worktree import ensure_worktree, main_repository

SESSION = "sess_01JD0000000000000000000000"


def p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def make_repo(top: Path, files: int) -> Path:
    repo = top / "project"
    for index in range(files):
        path = repo / "src" / f"d{index % 100}" / f"f{index}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# file {index}\n" + "value = 1\n" * 10)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=b", "-c", "user.email=b@b", "-c", "gc.auto=0", "commit", "-qm", "initial")
    git(repo, "repack", "-adq")  # the objects packed, as a real repository's mostly are
    return repo


def loose_bytes(git_dir: Path) -> int:
    objects = git_dir / "objects"
    return sum(p.stat().st_size for p in objects.glob("[0-9a-f][0-9a-f]/*"))


def tree_bytes(tree: Path) -> int:
    return sum(p.stat().st_size for p in tree.rglob("*") if p.is_file() and ".git" not in p.parts)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument(
        "--untracked", type=int, default=0, help="files an agent's turn 1 adds and never commits (a build)"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="worktrain-bench-") as folder:
        repo = make_repo(Path(folder), args.files)
        tree = ensure_worktree(main_repository(repo), SESSION, f"worktrain/{SESSION}", "HEAD", boxes).path
        box = SandboxBox(tuple(gitgrants.grants_for(tree)))
        took: list[float] = []
        added: list[int] = []
        alone: list[float] = []
        for index in range(args.untracked):
            made = tree / "build" / f"b{index % 20}" / f"out{index}.txt"
            made.parent.mkdir(parents=True, exist_ok=True)
            made.write_text(f"generated {index}\n" * 20)
        for turn in range(1, args.turns + 1):
            edited = tree / "src" / f"d{turn % 100}" / f"f{turn}.py"
            edited.write_text(edited.read_text() + f"value = {turn}\n")
            (tree / f"notes-{turn}.md").write_text(f"turn {turn}\n")
            before = loose_bytes(tree / ".git")
            started = time.perf_counter()
            take_snapshot(box, tree, turn, "Bench <bench@localhost>")
            took.append(time.perf_counter() - started)
            added.append(loose_bytes(tree / ".git") - before)
            started = time.perf_counter()
            box.run(tree, "true", {}, 60)
            alone.append(time.perf_counter() - started)
        size = tree_bytes(tree)
    rows = [
        ["snapshot (in the box)", f"{median(took) * 1000:.0f}", f"{p90(took) * 1000:.0f}"],
        ["the box alone (`true`)", f"{median(alone) * 1000:.0f}", f"{p90(alone) * 1000:.0f}"],
    ]
    per_turn = sorted(added)[len(added) // 2]
    text = "\n".join(
        [
            machine_line(),
            "",
            table(
                [
                    f"{args.files} files ({args.untracked} untracked), {args.turns} turns",
                    "median ms",
                    "p90 ms",
                ],
                rows,
            ),
            "",
            f"objects a snapshot adds: median {per_turn} bytes (max {max(added)}); "
            f"the worktree itself: {size} bytes (what a copy would cost)",
        ]
    )
    print(text)
    return text


if __name__ == "__main__":
    main()
