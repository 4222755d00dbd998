"""Webhook sending (SPEC §3.10): the sender a worker process runs; the Redis state is
daemon/bus/webhooks.py, the payloads and signatures daemon/bus/webhookpayloads.py."""
