"""The host: what one WorkTrain process needs from the machine it runs on.

Owns configuration (`config`: pydantic-settings), the secret hand-off between processes
(`secrets`), the embedded Redis (`embedded_redis`), Redis connections (`redisconn`; their
classes that never read a reply out of step and pin a step's connection, `instep`; Sentinel
URLs, the process's watch of the sentinels and the connections that follow it, `sentinelurl`,
`sentinelwatch`, `sentinel`),
process hardening (`prctl`, `private`), bind checks (`bind`), the clock, ids, and the
named crash points of the fault tests (`faults`).

May import: nothing else of `daemon` (it is the bottom layer).
Must not import: every other subpackage — they all build on it.
"""
