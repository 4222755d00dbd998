"""The fake model behind Bedrock's and Vertex's endpoint forms (docs/DEVELOPING.md), for the SDK's
`AnthropicBedrock` and `AnthropicVertex` clients pointed at it (ANTHROPIC_BEDROCK_BASE_URL,
ANTHROPIC_VERTEX_BASE_URL):

- Bedrock: `POST /model/<model>/invoke-with-response-stream`, the body without `model` and
  `stream` but with `anthropic_version`; the reply in AWS event-stream frames (each a
  `chunk` event whose JSON payload carries one API event, base64, in `bytes`);
- Vertex: `POST /projects/<p>/locations/<r>/publishers/anthropic/models/<model>:streamRawPredict`,
  the body without `model`; the reply the API's own SSE.

The request is recorded like any other, with `_provider` and `_path` (and its headers: the
auth each client sent), the model put back from the path, then answered by the same script.
"""

from __future__ import annotations

import base64
import json
import re
import zlib
from typing import Any
from urllib.parse import unquote

BEDROCK_PATH = re.compile(r"^/model/(?P<model>[^/]+)/(?P<op>invoke|invoke-with-response-stream)$")
VERTEX_PATH = re.compile(
    r"^/projects/[^/]+/locations/[^/]+/publishers/anthropic/models/(?P<model>[^/:]+):(?P<op>rawPredict|streamRawPredict)$"
)


def route(path: str) -> tuple[str, str, bool] | None:
    """(provider, model, streaming) of a provider's endpoint path, or None."""
    path = path.split("?")[0]
    if match := BEDROCK_PATH.match(path):
        return "bedrock", unquote(match["model"]), match["op"] == "invoke-with-response-stream"
    if match := VERTEX_PATH.match(path):
        return "vertex", unquote(match["model"]), match["op"] == "streamRawPredict"
    return None


def as_messages_body(raw: bytes, provider: str, model: str, streaming: bool, path: str) -> bytes:
    """The provider's body as the Messages API's (what the script answers)."""
    body: dict[str, Any] = json.loads(raw)
    body.update(model=model, stream=streaming, _provider=provider, _path=path)
    return json.dumps(body).encode()


def _header(name: str, value: str) -> bytes:
    encoded = value.encode()
    return bytes([len(name)]) + name.encode() + b"\x07" + len(encoded).to_bytes(2, "big") + encoded


def event_stream_frame(name: str, data: dict[str, Any]) -> bytes:
    """One AWS event-stream message carrying one API event, as Bedrock streams it."""
    payload = json.dumps({"bytes": base64.b64encode(json.dumps(data).encode()).decode()}).encode()
    headers = b"".join(
        _header(k, v)
        for k, v in (
            (":event-type", "chunk"),
            (":content-type", "application/json"),
            (":message-type", "event"),
        )
    )
    total = 12 + len(headers) + len(payload) + 4
    prelude = total.to_bytes(4, "big") + len(headers).to_bytes(4, "big")
    message = prelude + zlib.crc32(prelude).to_bytes(4, "big") + headers + payload
    return message + zlib.crc32(message).to_bytes(4, "big")


def sse_frame(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
