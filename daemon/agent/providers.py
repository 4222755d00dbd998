"""Where the model is reached (docs/DEVELOPING.md): `WORKTRAIN_MODEL_PROVIDER=anthropic | bedrock | vertex`.

Each provider is the SDK's own client — `Anthropic`, `AnthropicBedrock`, `AnthropicVertex` —
with its own credential chain, read by the worker process only (the sandbox never sees them:
daemon/sandbox/policy.py's environment keeps none of AWS_*, GOOGLE_*, CLOUD_ML_*):

- anthropic: `ANTHROPIC_API_KEY`, `ANTHROPIC_BASE_URL` (gateways);
- bedrock: AWS's chain through boto3 (`AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`, a profile, an
  instance role) signed SigV4, or `AWS_BEARER_TOKEN_BEDROCK`; `AWS_REGION`;
  `ANTHROPIC_BEDROCK_BASE_URL` for a private endpoint;
- vertex: Google's application default credentials (google-auth), `CLOUD_ML_REGION`,
  `ANTHROPIC_VERTEX_PROJECT_ID`; `ANTHROPIC_VERTEX_BASE_URL` for a private endpoint.

Every client gets the same HTTP client (the send guard's hook, daemon/agent/sendguard.py) and
`max_retries=0`: the worker's retries, the fleet-wide cap and the guard work the same for each.
Bedrock and Vertex wrap the Messages API in their own paths and envelopes (the model in the
path, `anthropic_version` in the body, Bedrock's replies in AWS event-stream frames), which
only the SDK's request preparation and stream decoding know: their calls go through
`client.messages.stream` (`stream_message`), the Anthropic API's through the faster raw path
of daemon/agent/model.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

Provider = Literal["anthropic", "bedrock", "vertex"]
PROVIDERS: tuple[Provider, ...] = ("anthropic", "bedrock", "vertex")


def provider_client(provider: str, api_key: str | None, base_url: str | None, http_client: Any) -> Any:
    """The SDK's client for `provider` (ValueError for an unknown one)."""
    import anthropic

    if provider == "anthropic":
        return anthropic.Anthropic(api_key=api_key, base_url=base_url, max_retries=0, http_client=http_client)
    if provider == "bedrock":
        return anthropic.AnthropicBedrock(max_retries=0, http_client=http_client)
    if provider == "vertex":
        return anthropic.AnthropicVertex(max_retries=0, http_client=http_client)
    raise ValueError(f"unknown model provider {provider!r}: one of {', '.join(PROVIDERS)}")


def uses_raw_path(client: Any) -> bool:
    """Not a provider's client: the body can be posted as bytes and the SSE read raw."""
    import anthropic

    return not isinstance(client, anthropic.AnthropicBedrock | anthropic.AnthropicVertex)


def stream_message(
    client: Any, body: dict[str, Any], timeout: Any, opened: Callable[[Any], None] | None = None
) -> dict[str, Any]:
    """One streaming call through the SDK's `messages.stream` (Bedrock, Vertex): the final
    message as a dict. `opened(response)` is told the HTTP response as soon as it exists,
    so an interrupt can cut it."""
    with client.messages.stream(**body, timeout=timeout) as stream:
        if opened is not None:
            opened(stream.response)
        message = stream.get_final_message()
    data: dict[str, Any] = message.model_dump(mode="json")
    return data
