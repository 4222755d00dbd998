"""The webhook outbox: deliveries queued with the events they announce, claimed and settled
by the sender (`webhooks`).

May import: daemon.bus's plumbing, daemon.bus.streams, daemon.schema, daemon.host.
"""
