-- Shared prelude of the webhook delivery scripts (webhook_claim.lua, webhook_settle.lua),
-- prepended by daemon/bus/scripts.py. They take the fleet's webhook keys only, all in the
-- `{webhooks}` hash-tag slot (daemon.bus.keys.WebhookKeys), no session key:
--   KEYS[1] deliveries  hash        delivery id -> record JSON
--   KEYS[2] due         sorted set  delivery id -> next try (ms); pending deliveries only
--   KEYS[3] log         sorted set  delivery id -> queued at (ms)
--   KEYS[4] failed      sorted set  delivery id -> given up at (ms)
-- Redis 6.2 commands only.
local W = { deliveries = KEYS[1], due = KEYS[2], log = KEYS[3], failed = KEYS[4] }
