"""The sandbox an agent's commands run in (SPEC §4.7).

Owns how a command is isolated from WorkTrain and from other sessions: today the PID
namespace with its own /proc and the tmpfs cover over the data dir's private folders
(`namespaces`).

May import: `host`.
Must not import: `bus`, `tools`, `agent`, `session` — it is given paths and a command
and knows nothing of sessions.
"""
