"""The sandbox an agent's commands run in (docs/security.md; docs/security.md is the threat model).

Owns how a command is confined, one module per layer:
- `namespaces`: the PID (and, under `none`, network) namespace with its own /proc, via
  util-linux `unshare`, and the tmpfs cover over the data dir's private folders;
- `launch`: the launcher run inside them that applies the rest, then execs the shell —
  `rlimits`, `landlock` (filesystem and TCP rules, own ctypes calls), `caps` (every
  capability dropped, `no_new_privs`), `loopback` (the namespace's `lo` up);
- `policy`: pure — the configuration and one command's plan (which layers, which rules);
- `network`: the network modes, ports and their checks;
- `report`: the probe at start, `layers()` (layer -> state for the banner and
  `/api/v2/workers`), `WORKTRAIN_SANDBOX=required`;
- `command`: `sandboxed(...)`, what the Bash tool calls (`read_only=` for read-only workspaces);
- `roots`: where a workspace may be, and what Read/Write never touch (the data dir, credentials).

May import: `host`.
Must not import: `bus`, `tools`, `agent`, `session` — it is given paths and a command
and knows nothing of sessions. `launch` and the layer modules it imports use the standard
library only (they run before every command; see launch.py).
"""
