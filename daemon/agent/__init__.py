"""The agent: one attempt's loop from model call to turn end.

Owns the loop (`loop`: reads in one screen), the attempt's state (`state`), the model
turn and model call (`modelturn`, `modelcall`: retries, slots, interrupts, stall), the
Anthropic adapter (`model`) and its reader of a reply stream (`replystream`), the retry
policy (`retrypolicy`), waiting while steerable (`waiting`), the compactor (`compactor`),
the system prompt (`prompt`), how a session ends (`endings`) and the per-turn events
(`replyevents`).

May import: `host`, `turn`, `bus`, `workflows`, `tools`.
Must not import: `session` (the runner that calls it), nor `web`, `worker`, `cli`.
"""
