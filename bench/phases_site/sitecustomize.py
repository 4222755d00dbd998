"""bench/scale_phases.py's probe in every `worktrain worker` process (on PYTHONPATH only for it).

With `WT_BENCH_PHASES_DIR` naming a folder, a `worktrain worker` process wraps the phases
of bench/phases.py and, when the bench drops a file `take.<label>` in that folder, writes its
ledger so far (and its CPU time) to `<pid>.<label>.json`. The pool's children are forked
after this ran: each starts its own ledger and watcher thread.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

FOLDER = os.environ.get("WT_BENCH_PHASES_DIR")


def _watch(folder: Path, ledger: object) -> None:
    taken: set[str] = set()
    while True:
        time.sleep(0.2)
        for mark in folder.glob("take.*"):
            label = mark.name.split(".", 1)[1]
            if label in taken:
                continue
            taken.add(label)
            snapshot = ledger.snapshot()  # type: ignore[attr-defined]
            snapshot["process_cpu"] = {"": time.process_time()}
            out = folder / f"{os.getpid()}.{label}.json"
            out.write_text(json.dumps(snapshot))


def _start() -> None:
    assert FOLDER is not None
    bench = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(bench))
    from phases import Ledger, install

    ledger = Ledger()
    install(ledger)

    def fresh() -> None:  # a forked child: its own counts, lock and watcher
        ledger.cpu.clear()
        ledger.calls.clear()
        ledger.trips.clear()
        ledger.lock = threading.Lock()
        ledger.local = threading.local()
        threading.Thread(target=_watch, args=(Path(FOLDER), ledger), daemon=True).start()

    os.register_at_fork(after_in_child=fresh)
    threading.Thread(target=_watch, args=(Path(FOLDER), ledger), daemon=True).start()


if FOLDER and len(sys.argv) > 1 and sys.argv[1] == "worker" and sys.argv[0].endswith("worktrain"):
    _start()
