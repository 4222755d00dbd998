"""The steer bus: everything WorkTrain keeps in Redis, and every script that changes it.

Owns the key layout (`keys`: the one module that names Redis keys), the Lua scripts and
their loader (`lua/`, `scripts`), the records read back (`records`), the session registry
(`registry`), the steer bus and a session's worker-side channel (`steers`: accept,
retract, edit, claim, turn start and end, drain, checkpoint, finish), fencing tokens
(`fencing`), lease beats (`leasebeats`), receipts (`receipts`), the idle wait's shared
reader (`steerwaiter`), the interrupt listener (`interruptlistener`), the fleet-wide
model-call cap (`modelslots`), the reaper and the job payload it re-enqueues (`reaper`,
`jobspec`), and the event and issue streams with their JSONL mirrors (`events`, `issues`).

May import: `host`, `turn`, `workflows` (a job names its workflow's limits).
Must not import: `sandbox`, `tools`, `agent`, `session` — the bus knows nothing of what
an agent does with a turn.
"""
