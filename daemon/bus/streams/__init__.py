"""The bus's streams: events (`eventsink`, and the process's `mirror` into wt:events and
the JSONL), issues (`issues`), and reads of any stream by
cursor (`reads`).

May import: daemon.bus's plumbing (keys, scripts, replies), daemon.schema, daemon.host.
"""
