"""Triggers (README's Triggers): sessions started, steered or queued from the outside world —
GitHub's and GitLab's webhooks and polls of their REST APIs, or a generic signed sender —
exactly once fleet-wide, and a comment on the item when the session ends.

Owns the triggers file (`spec`, `loading`, `setup`; `secretnames` for the secrets' variables,
read before a process seals its own), the templates (`templates`: Jinja's sandbox), the
provider adapters (`providers/`: signatures, events, listings, pages, rate limits), which
events a trigger takes (`matching`), a fire (`firing`: through the same dispatch as the
HTTP route), a poll (`polling`, over `http`), the background loops (`runner`) and the
report-back comment (`reportback`). Its Redis state is daemon/bus/fleet/triggers.py.

May import: host, bus, workflows, sandbox (the workspace roots), webhooks (the sender's poster).
"""
