"""Every setting of README's Configuration, read from the environment by pydantic-settings.

Secrets (`ANTHROPIC_API_KEY`, `WORKTRAIN_API_TOKEN`, `REDIS_PASSWORD`) are not in the
environment of a sealed process (daemon/host/secrets.py): `load_settings` adds the ones it holds.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import quote, urlsplit, urlunsplit

from pydantic import AliasChoices, Field, ValidationError, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from daemon.host import secrets
from daemon.host.receiveraddresses import HOW_TO_ALLOW, ReceiverPolicy, parse_networks, url_refusal

DEFAULT_PORT = 3456
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"  # `web` and `worker` without REDIS_URL


ModelProvider = Literal["anthropic", "bedrock", "vertex"]


class ModelSettings(BaseSettings):
    """The model a session runs unless its dispatch or its workflow says otherwise, and how
    it is reached (docs/DEVELOPING.md). Its own class: the web reads it to check a dispatch's
    agentConfig without the worker's settings."""

    model_config = SettingsConfigDict(env_prefix="WORKTRAIN_", extra="ignore", populate_by_name=True)

    model: str = "claude-sonnet-4-5"
    max_output_tokens: int = Field(default=8192, ge=1, le=128_000)
    thinking_budget: int = Field(default=0, ge=0)  # 0: no extended thinking
    model_provider: ModelProvider = (
        "anthropic"  # the SDK client: Anthropic, AnthropicBedrock, AnthropicVertex
    )
    prices_file: Path | None = None  # the price table (default daemon/agent/prices.json)


class Settings(ModelSettings):
    """One place that knows each variable's name and default; the README table mirrors it."""

    model_config = SettingsConfigDict(env_prefix="WORKTRAIN_", extra="ignore", populate_by_name=True)

    redis_url: str | None = Field(default=None, validation_alias=AliasChoices("REDIS_URL"))
    redis_password: str | None = Field(default=None, validation_alias=AliasChoices("REDIS_PASSWORD"))
    data_dir: Path = Field(default_factory=lambda: Path.home() / ".worktrain")
    api_token: str | None = None
    bind: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    url: str = f"http://127.0.0.1:{DEFAULT_PORT}"
    workflows_dir: Path | None = None
    idle_wait_seconds: float = 120.0
    redis_prefix: str = "wt"
    # acknowledge a change only once WAIT confirms it on this many replicas (docs/redis.md)
    redis_wait_replicas: int = Field(default=0, ge=0)
    redis_wait_ms: int = Field(default=1000, ge=1)
    lease_seconds: float = 30.0
    retention_days: float = 7.0
    soul_file: Path | None = None
    model_retry_seconds: float = Field(default=600.0, ge=0)  # retries of a failing model call, per turn
    max_model_calls: int = Field(default=0, ge=0)  # model calls in flight across the fleet; 0: no cap
    context_tokens: int = Field(default=200_000, ge=1000)  # the model's context window
    compact_at: float = Field(default=0.8, gt=0, le=1)  # compact above this share of the window
    max_steer_bytes: int = Field(default=32768, ge=1)
    max_pending_steers: int = Field(default=100, ge=1)
    max_event_streams: int | None = Field(default=None, ge=1)  # per web process; None: half its threads
    # a request's headers and body must arrive within this (web/deadlines.py)
    read_timeout_seconds: float = Field(default=10.0, gt=0)
    max_spawn_depth: int = Field(
        default=2, ge=0
    )  # how deep spawn_agent's children may nest (README's Sub-agents and questions)
    # worktree sessions' delivery (README's Coding sessions): commit author, push remote, the command
    # run after
    git_author: str = Field(default="WorkTrain <worktrain@localhost>", pattern=r"^[^<>]+<[^<>\s]+>$")
    git_remote: str = "origin"  # a URL, or a remote's name in the session's repository
    git_push_config: str | None = None  # the one git config file a push reads (its credentials)
    delivery_command: str | None = None
    anthropic_api_key: str | None = Field(default=None, validation_alias=AliasChoices("ANTHROPIC_API_KEY"))
    anthropic_base_url: str | None = Field(default=None, validation_alias=AliasChoices("ANTHROPIC_BASE_URL"))
    # The sandbox of agent commands (docs/security.md, daemon/sandbox/)
    sandbox: Literal["auto", "required"] = "auto"
    sandbox_network: Literal["none", "egress", "host"] = "none"
    sandbox_ports: str = "22,80,443,9418"  # egress: the TCP ports a command may connect to
    sandbox_read: Annotated[tuple[Path, ...], NoDecode] = ()  # os.pathsep-separated, readable too
    sandbox_memory_mb: int = Field(default=4096, ge=64)
    # Where a session's workspace may be (os.pathsep-separated; empty: the home and /tmp, docs/security.md)
    workspace_roots: Annotated[tuple[Path, ...], NoDecode] = ()
    max_steer_edits: int = Field(default=20, ge=1)  # edits of one pending steer (docs/security.md)
    # Webhooks (README's Webhooks): the non-public receivers the operator allows (before the
    # receivers: their check reads these), fleet-wide receivers (comma-separated), the signing
    # secret, retries
    webhook_allow_private: bool = False
    webhook_allow_networks: str = ""
    webhook_urls: str = ""
    webhook_secret: str | None = None
    webhook_backoff_seconds: float = Field(default=1.0, gt=0)  # the first retry's delay, doubling
    webhook_backoff_max_seconds: float = Field(default=3600.0, gt=0)
    webhook_give_up_seconds: float = Field(default=86400.0, gt=0)
    webhook_timeout_seconds: float = Field(default=10.0, gt=0)
    # Triggers (README's Triggers): the file; None: <data dir>/triggers.yml, when it exists
    triggers_file: Path | None = None
    # Optional tracing (docs/operations.md): daemon/host/tracing.py reads it (and the SDK its OTEL_* siblings)
    otel_exporter_otlp_endpoint: str | None = Field(
        default=None, validation_alias=AliasChoices("OTEL_EXPORTER_OTLP_ENDPOINT")
    )

    @field_validator("data_dir", "workflows_dir", "soul_file", "triggers_file", mode="after")
    @classmethod
    def _expand_home(cls, path: Path | None) -> Path | None:
        # `WORKTRAIN_DATA_DIR=~/wt` from an env file reaches us with a literal `~`
        return path.expanduser() if path is not None else None

    @field_validator("sandbox_read", "workspace_roots", mode="before")
    @classmethod
    def _path_list(cls, value: Any) -> Any:
        if isinstance(value, str):  # `/a:/b` from the environment, `~` expanded
            return tuple(Path(part).expanduser() for part in value.split(os.pathsep) if part.strip())
        return value

    @field_validator("api_token", mode="after")
    @classmethod
    def _visible_ascii_token(cls, token: str | None) -> str | None:
        # HTTP header values are bytes; servers disagree on anything beyond ASCII (granian
        # hands the app an empty string), so such a token could never be matched.
        if token is not None and not (token.isascii() and token.isprintable() and token.strip() == token):
            raise ValueError("WORKTRAIN_API_TOKEN must be printable ASCII without surrounding spaces")
        return token

    @property
    def redis_url_or_default(self) -> str:
        """The URL every client connects with, REDIS_PASSWORD included (never log it)."""
        url = self.redis_url or DEFAULT_REDIS_URL
        return with_password(url, self.redis_password) if self.redis_password else url

    @field_validator("webhook_allow_networks", mode="after")
    @classmethod
    def _allowed_networks(cls, value: str) -> str:
        parse_networks(value)  # ValueError names the entry
        return value

    @field_validator("webhook_urls", mode="after")
    @classmethod
    def _receiver_urls(cls, value: str, info: ValidationInfo) -> str:
        allowed = ReceiverPolicy.of(
            bool(info.data.get("webhook_allow_private")), str(info.data.get("webhook_allow_networks", ""))
        )
        for part in value.split(","):
            url = urlsplit(part.strip())
            if part.strip() and (url.scheme not in ("http", "https") or not url.hostname):
                raise ValueError("each URL must be an absolute http:// or https:// URL")
            if part.strip() and (why := url_refusal(part.strip(), allowed)):
                raise ValueError(f"{part.strip()}: {why}, not allowed unless {HOW_TO_ALLOW}")
        return value

    @property
    def webhook_receivers(self) -> ReceiverPolicy:
        """The addresses a webhook receiver may have (daemon/host/receiveraddresses.py)."""
        return ReceiverPolicy.of(self.webhook_allow_private, self.webhook_allow_networks)

    @property
    def retention_seconds(self) -> int:
        return int(self.retention_days * 86400)


class ConfigError(ValueError):
    """An environment variable holds a value WorkTrain cannot use."""


def with_password(url: str, password: str) -> str:
    """`url` carrying `password`, unless it carries one of its own."""
    parts = urlsplit(url)
    # a Sentinel URL's netloc is a list of sentinels: urlsplit keeps it whole, as wanted
    userinfo, at, hostport = parts.netloc.rpartition("@")
    if at and ":" in userinfo:
        return url
    netloc = f"{userinfo}:{quote(password, safe='')}@{hostport}"
    return urlunsplit(parts._replace(netloc=netloc))


_SECRET_FIELDS = {
    secrets.API_KEY: "anthropic_api_key",
    secrets.API_TOKEN: "api_token",
    secrets.REDIS_PASSWORD: "redis_password",
    secrets.WEBHOOK_SECRET: "webhook_secret",
}


def load_settings() -> Settings:
    """The settings from the environment and the secrets this process holds (daemon.host.secrets);
    ConfigError names each variable that is wrong."""
    held: dict[str, Any] = {
        _SECRET_FIELDS[name]: value for name, value in secrets.held().items() if name in _SECRET_FIELDS
    }
    try:
        return Settings(**held)
    except ValidationError as exc:
        problems = "; ".join(f"{_variable(e['loc'])}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"invalid configuration: {problems}") from None


def _variable(loc: tuple[int | str, ...]) -> str:
    name = str(loc[0]) if loc else "?"
    field = Settings.model_fields.get(name)
    alias = field.validation_alias if field is not None else None
    if isinstance(alias, AliasChoices):
        return str(alias.choices[0])
    return f"WORKTRAIN_{name.upper()}"
