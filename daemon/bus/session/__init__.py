"""One session on the bus: its channel (`steerbus`: the steer bus, the live turn, the
drain, the checkpoint), its fence and lease (`fencing`, `leasebeats`, `receipts`), what wakes
it (`journalwaiter`, `interruptlistener`), its record and dispatch (`registry`, `dispatch`),
its children, signals and forks (`spawns`, `signals`, `forks`), its history
(`conversation`), its events on the way out (`attemptevents`, and `eventwriter`: the process's writer of what
no script carried) and the record fields a checkpoint writes (`checkpointfields`).

May import: daemon.bus's plumbing (keys, scripts, replies, replication), daemon.bus.streams,
daemon.bus.outbox (a fork queues its webhooks), daemon.schema, daemon.host, daemon.turn,
daemon.workflows.
"""
