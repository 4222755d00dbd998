"""The worker tier's process titles: `worktrain worker [NAME] Listening on worktrain`, not RQ's
`rq:worker:NAME: ...` (RQ retitles its processes whenever setproctitle is installed, and it
is: cli/tiers.py names the tiers with it). The comm name follows the title's first 15 bytes
(setproctitle sets both), so `top` reads `worktrain worke` for every process of the tier."""

from __future__ import annotations

from setproctitle import setproctitle

TITLE = "worktrain worker"
NAME_CHARS = 8


class TitledWorker:
    """Mixin for RQ workers: their `procline` under WorkTrain's name."""

    name: str

    def procline(self, message: str) -> None:
        # the start of RQ's name (32 hex digits, mostly): the title has only the room of the
        # command line the process started with (cli/tiers.py, SPT_NOENV), the state must fit
        setproctitle(f"{TITLE} [{self.name[:NAME_CHARS]}] {message}")
