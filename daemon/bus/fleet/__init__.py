"""What every host of the fleet shares on the bus: the worker registry (`workers`), metrics
(`metrics`, `metricsread`), the model-call slots (`modelslots`), the reaper (`reaper`), the
fleet's history (`history`) and the triggers' state (`triggers`).

May import: daemon.bus's plumbing, daemon.bus.session (the registry, the steer bus),
daemon.schema, daemon.host.
"""
