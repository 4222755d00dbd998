"""Where a worker's session threads spend their wall time, from `py-spy record --idle --format raw`.

    .venv/bin/python bench/pyspy_breakdown.py OUTDIR/idle_worker.txt [--gil OUTDIR/gil_worker.txt]

Every sample of a session thread (its stack passes `run_session`) is put in one bucket by
the frames it waits in (bench/wallclock_probe.sh takes the samples). With `--gil`, the
frames most often holding the GIL as well.
"""

from __future__ import annotations

import argparse
import collections

BUCKETS = (
    ("flock of the JSONL mirror", ("events.py:323", "fcntl")),
    ("model call in flight (abandonable wait)", ("abandonable",)),
    ("the JSONL append, rest (open, stat)", ("append_jsonl",)),
    ("Redis reply wait", ("read_response", "can_read")),
    ("Redis pool wait (a free connection)", ("get_connection",)),
    ("Redis send", ("send_packed_command",)),
    ("httpcore pool lock", ("ThreadLock.__enter__",)),
    ("event mirror flush (a job's end)", ("EventMirror.flush",)),
)


def bucket(stack: str) -> str:
    for name, marks in BUCKETS:
        if name.startswith("model call") and not ("Event.wait" in stack or "Condition.wait" in stack):
            continue
        if any(mark in stack for mark in marks):
            return name
    return "other: " + ";".join(frame.split(" (")[0] for frame in stack.split(";")[-3:])


def load(path: str) -> collections.Counter[str]:
    counts: collections.Counter[str] = collections.Counter()
    with open(path) as lines:
        for line in lines:
            if line.strip():
                stack, n = line.rstrip().rsplit(" ", 1)
                counts[stack] += int(n)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("idle")
    parser.add_argument("--gil")
    args = parser.parse_args()
    sessions = {s: n for s, n in load(args.idle).items() if "run_session" in s}
    total = sum(sessions.values())
    shares: collections.Counter[str] = collections.Counter()
    for stack, n in sessions.items():
        shares[bucket(stack)] += n
    print(f"| session threads' wall time ({total} samples) | share |\n| --- | ---: |")
    for name, n in shares.most_common(12):
        print(f"| {name} | {n / total * 100:.1f} % |")
    if args.gil:
        gil = load(args.gil)
        held = sum(gil.values())
        frames: collections.Counter[str] = collections.Counter()
        for stack, n in gil.items():
            frames[";".join(frame.split(" (")[0] for frame in stack.split(";")[-3:])] += n
        print(f"\n| holding the GIL ({held} samples) | share |\n| --- | ---: |")
        for name, n in frames.most_common(8):
            print(f"| {name} | {n / held * 100:.1f} % |")


if __name__ == "__main__":
    main()
