"""The vocabulary of one agent turn, shared by every layer that handles a turn.

Owns the typed message history (`messages`: the Anthropic content blocks as pydantic
models, the turn-end message) and the live turn's interrupt flag (`interrupt`: requested
by the bus's listener, watched by the model call and the tools).

Pure: no Redis, no processes, no I/O.
May import: nothing else of `daemon`.
Must not import: `bus`, `tools`, `agent`, `session` (they all speak in these terms).
"""
