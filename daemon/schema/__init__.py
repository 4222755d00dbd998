"""The shared vocabulary, a floor below the bus: the records a session is stored as
(`records`, `workspace`, `turnmarks`), the events every tier writes and reads (`events`),
what an agent reports and signals (`issues`, `signals`), what a turn's end stores with its
drain (`endcheckpoint`), and the payloads of outgoing webhooks (`webhookpayloads`). Pydantic
models and pure functions only: nothing here touches Redis, a file or a socket.

May import: daemon.host, daemon.workflows (a record's agent configuration).
"""
