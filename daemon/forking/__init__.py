"""Forks (README's "Fork a session", SPEC 3.12): a new session that carries on from any turn of
another, with its history through that turn's end (taken from the journal: the model is not
asked again), its workflow position after that turn, and — for a worktree session — its
worktree as it was then (a snapshot), on a branch of its own; its next turn reads the
fork's optional steer first.

Owns: the cut of a history at a turn's end (`history`, pure) and the fork itself (`fork`:
what a source allows, the fork's record, one transaction). The worktree side (taking and
restoring snapshots) is daemon/workspaces/snapshots.py; the worker's side of a fork's first
attempt is daemon/session/ (its placement, its start: `Forked`, daemon/agent/start.py, whose
first turn opens the history with daemon/turn/messages.py `fork_opening`).

May import: `host`, `turn`, `workflows`, `bus`. Imported by the web tier and `session`.
"""
