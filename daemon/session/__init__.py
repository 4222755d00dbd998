"""A session's attempt tied together: the top of the core.

Owns the runner (`runner`: claim, build the agent's state from the record and history,
run the loop, finish or hand over) and the session hub (`sessionhub`: one process's
shared lease beats and idle waiter, plugged into each attempt).

May import: every other subpackage of `daemon`.
Must not import: `web`, `worker`, `cli` (the shells around the core).
"""
