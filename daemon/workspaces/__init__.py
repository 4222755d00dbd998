"""Where a session works, and what becomes of its work (README's Coding sessions).

Owns the branch strategies — `none` (the workspace as it is), `read-only` (the tools refuse
to write and Bash's workspace is mounted read-only), `worktree` (a git worktree of its own
under `<repo>/.worktrain/worktrees/<sessionId>` on branch `worktrain/<sessionId>`) — and the
delivery of a worktree's work at the end: commit, push, the delivery command, removing the
worktree. Git is the `git` binary of the worker's host (`git`), run outside the agent's
sandbox with the worker's own configuration, hooks disabled.

May import: `host`, `bus` (the record's workspace types).
Must not import: `sandbox`, `tools`, `agent`, `session` — the session layer calls it with a
record and gets a path and a `Delivery` back.
"""
