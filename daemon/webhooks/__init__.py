"""Webhook sending (README's Webhooks): the sender a worker process runs, on threads of its own.

Owns the POST of a delivery and its retry schedule; the Redis state is daemon/bus/outbox/webhooks.py,
the payloads and signatures daemon/schema/webhookpayloads.py (the bus queues deliveries with
their events, so it needs them below this package).

May import: host, bus.
"""
