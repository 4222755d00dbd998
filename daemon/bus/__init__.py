"""The steer bus: everything WorkTrain keeps in Redis, and every script that changes it.

Its plumbing sits at the top: the key layout (`keys`: the one module that names Redis
keys), the Lua scripts and their loader (`lua/`, `scripts`), each reply decoded once
(`replies`), a pipelined run of several scripts (`scriptpipe`), the WAIT that confirms a
write on replicas (`replication`) and the job payload a session is enqueued with
(`jobspec`). The rest is grouped by what it serves: `session` (one session's channel,
fence, lease, record, children and history), `streams` (events and issues, their mirror,
reads by cursor), `fleet` (workers, metrics, model-call slots, the reaper, the fleet's
history, triggers) and `outbox` (webhook deliveries). The records and events themselves
are daemon/schema's.

May import: `host`, `turn`, `workflows` (a job names its workflow's limits), `schema`.
Must not import: `sandbox`, `tools`, `agent`, `session` — the bus knows nothing of what
an agent does with a turn.
"""
