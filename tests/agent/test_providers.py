"""Bedrock and Vertex (docs/DEVELOPING.md): the SDK's own `AnthropicBedrock` and `AnthropicVertex`
clients (made by `make_client`, as a worker makes them) against the fake model behind each
provider's endpoint form on loopback (daemon/fakemodel/providers.py). Ground truth is what
the fake received: the provider's path, its body envelope, the auth its credential chain
produced (SigV4 through boto3, a Bedrock API key, a Google access token refreshed from a
credentials file whose token endpoint is a loopback fake). The reply, thinking blocks
included, comes back as from the Anthropic API; an overloaded provider is a failure the
worker's retry policy retries, as for the API."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from daemon.agent.model import AnthropicModel, ModelApiError, ModelRequest, make_client
from daemon.agent.retrypolicy import Verdict, classify
from daemon.fakemodel import FakeError, FakeModelServer, reply, text, tool
from daemon.turn.messages import Message, RedactedThinkingBlock, TextBlock, ThinkingBlock
from tests.tiers import fixture_tier

pytestmark = pytest.mark.unit

MODEL_BEDROCK = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
MODEL_VERTEX = "claude-sonnet-4-5@20250929"


def request() -> ModelRequest:
    return ModelRequest("You are a test.", (), (Message(role="user", content=(TextBlock(text="hello"),)),))


@pytest.fixture
@fixture_tier("redis")
def fake() -> Iterator[FakeModelServer]:
    server = FakeModelServer(
        [FakeError(529, "overloaded_error", "Overloaded"), reply(text("Hi."), tool("Read", path="README.md"))]
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


def call_twice(model: AnthropicModel) -> Any:
    """The first call meets the overload (retried by the worker's policy), the second answers."""
    with pytest.raises(ModelApiError) as failed:
        model.complete(request())
    assert failed.value.failure.status == 529 and classify(failed.value.failure) is Verdict.RETRY
    return model.complete(request())


def assert_thinking_reply(answer: Any) -> None:
    kinds = [type(block) for block in answer.content]
    assert kinds[:2] == [ThinkingBlock, RedactedThinkingBlock] and answer.content[2] == TextBlock(text="Hi.")
    assert answer.content[3].name == "Read" and answer.usage.prompt_tokens > 0


def test_bedrock_signs_with_sigv4_and_speaks_its_endpoint(
    fake: FakeModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_BEDROCK_BASE_URL", fake.url)
    monkeypatch.setenv("AWS_REGION", "eu-west-3")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLEWORKTRAIN")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
    monkeypatch.delenv("AWS_BEARER_TOKEN_BEDROCK", raising=False)
    client = make_client(provider="bedrock")
    answer = call_twice(AnthropicModel(MODEL_BEDROCK, client=client, max_tokens=4000, thinking_budget=2048))
    assert_thinking_reply(answer)
    sent = fake.requests[-1]
    assert sent["_path"] == "/model/us.anthropic.claude-sonnet-4-5-20250929-v1:0/invoke-with-response-stream"
    assert sent["anthropic_version"]  # the provider's envelope (the SDK's version string)
    assert (sent["max_tokens"], sent["thinking"]) == (4000, {"type": "enabled", "budget_tokens": 2048})
    auth = sent["_headers"]["authorization"]
    assert auth.startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLEWORKTRAIN/")
    assert "/eu-west-3/bedrock/aws4_request" in auth and "x-amz-date" in sent["_headers"]
    assert "x-api-key" not in sent["_headers"]


def test_bedrock_takes_an_api_key_too(fake: FakeModelServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_BEDROCK_BASE_URL", fake.url)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_BEARER_TOKEN_BEDROCK", "bedrock-api-key-for-tests")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    call_twice(AnthropicModel(MODEL_BEDROCK, client=make_client(provider="bedrock")))
    assert fake.requests[-1]["_headers"]["authorization"] == "Bearer bedrock-api-key-for-tests"


class TokenEndpoint(BaseHTTPRequestHandler):
    """Google's OAuth token endpoint, on loopback: a signed JWT in, an access token out."""

    seen: list[str] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0)).decode()
        self.seen.append(body)
        data = json.dumps({"access_token": "ya29.loopback-token", "expires_in": 3600, "token_type": "Bearer"})
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.end_headers()
        self.wfile.write(data.encode())

    def log_message(self, format: str, *args: Any) -> None:
        pass


def service_account(token_uri: str) -> dict[str, str]:
    """A service account's key file (a fresh RSA key) whose token endpoint is `token_uri`."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    return {
        "type": "service_account",
        "project_id": "wt-project",
        "private_key_id": "k1",
        "private_key": pem,
        "client_email": "worktrain@wt-project.iam.gserviceaccount.com",
        "client_id": "1",
        "token_uri": token_uri,
    }


def test_vertex_uses_googles_credentials_and_speaks_its_endpoint(
    fake: FakeModelServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    tokens = ThreadingHTTPServer(("127.0.0.1", 0), TokenEndpoint)
    threading.Thread(target=tokens.serve_forever, daemon=True).start()
    try:
        credentials = tmp_path / "service-account.json"
        credentials.write_text(
            json.dumps(service_account(f"http://127.0.0.1:{tokens.server_address[1]}/token"))
        )
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(credentials))
        monkeypatch.setenv("ANTHROPIC_VERTEX_BASE_URL", fake.url)
        monkeypatch.setenv("ANTHROPIC_VERTEX_PROJECT_ID", "wt-project")
        monkeypatch.setenv("CLOUD_ML_REGION", "us-east5")
        client = make_client(provider="vertex")
        answer = call_twice(
            AnthropicModel(MODEL_VERTEX, client=client, max_tokens=4000, thinking_budget=2048)
        )
    finally:
        tokens.shutdown()
    assert_thinking_reply(answer)
    sent = fake.requests[-1]
    assert sent["_path"] == (
        "/projects/wt-project/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:streamRawPredict"
    )
    assert sent["anthropic_version"]
    assert sent["_headers"]["authorization"] == "Bearer ya29.loopback-token"
    assert any(
        "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer" in b for b in TokenEndpoint.seen
    )
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 2048}


def test_a_providers_request_passes_the_send_guard(
    fake: FakeModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fence's last check is the same for Bedrock: a refusing gate sends nothing."""
    from daemon.agent.sendguard import SendGate, SendRefused, gated

    monkeypatch.setenv("ANTHROPIC_BEDROCK_BASE_URL", fake.url)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_BEARER_TOKEN_BEDROCK", "bedrock-api-key-for-tests")
    model = AnthropicModel(MODEL_BEDROCK, client=make_client(provider="bedrock"))

    def refuse() -> None:
        raise RuntimeError("stale attempt")

    with gated(SendGate(refuse, attempt="sess/1")), pytest.raises(SendRefused):
        model.complete(request())
    assert fake.requests == []
    # the script's overload, answered: the gate let it through
    with gated(SendGate(lambda: None, attempt="sess/2")) as gate, pytest.raises(ModelApiError):
        model.complete(request())
    assert gate.sends == 1 and fake.requests[-1]["_headers"]["x-worktrain-attempt"] == "sess/2"  # loopback
