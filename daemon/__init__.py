"""WorkTrain's core: everything but the shells (`web/`, `worker/`, `cli/`) that run it.

Subpackages, lowest first (docs/DEVELOPING.md has the map; tests/test_layers.py holds
every arrow to it):
- `host`, `turn`, `workflows`, `fakemodel`: the bottom; each imports nothing of the others.
- `bus`: the Redis side (keys, Lua, steers, fencing, leases, events, issues).
- `sandbox`: where an agent's commands run.
- `tools`: the agent's tools.
- `agent`: the loop, the model turn and call.
- `session`: the runner that ties one attempt together.

Nothing in `daemon` imports `web`, `worker` or `cli`.
"""
