"""One entry of the triggers file (README's Triggers), as pydantic validates it.

Pure: no environment, no Redis, no network. Unknown fields are refused (a typo such as
`whileRuning` would otherwise silently fall back to the default). Secrets are never in the
file: `secretEnv` and `tokenEnv` name the environment variables that hold them.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from daemon.host.ids import TRIGGER_ID_RE
from daemon.host.secrets import NOT_SECRETS
from daemon.schema.webhookpayloads import check_receiver_url
from daemon.schema.workspace import BranchStrategy, DeliveryMode
from daemon.workflows.agentconfig import AgentConfig

Source = Literal["github", "gitlab", "generic"]
Mode = Literal["webhook", "poll"]
WhileRunning = Literal["steer", "queue", "ignore"]
ReportBack = Literal["comment", "none"]

ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
EVENT_NAME = r"^[a-z_]{1,64}(\.[a-z_]{1,64})?$"
GIT_REV = r"^[A-Za-z0-9_][A-Za-z0-9._/~^@-]*$"
MIN_INTERVAL_SECONDS = 10
DEFAULT_API_URLS: dict[str, str] = {"github": "https://api.github.com", "gitlab": "https://gitlab.com/api/v4"}
# What a poll can list (README's Triggers): the poll's "event" is the kind of item it lists
POLL_EVENTS: dict[str, frozenset[str]] = {
    "github": frozenset({"issues", "pull_request"}),
    "gitlab": frozenset({"issues", "merge_request"}),
    "generic": frozenset(),
}

OneOrMany = str | list[str]


def as_list(value: OneOrMany | None) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


class Exclusions(BaseModel):
    """`filter.not`: an item by one of these authors, or with one of these labels, is passed over."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    author: OneOrMany | None = None
    label: OneOrMany | None = None


class TriggerFilter(BaseModel):
    """Which items a trigger takes: each field given must hold (a list: any one of it)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    label: OneOrMany | None = None  # the item carries it (a `*.labeled` event: the label just added)
    repo: OneOrMany | None = None  # github: owner/name
    project: OneOrMany | None = None  # gitlab: the project's path (group/name) or id
    author: OneOrMany | None = None  # the item's author's login / username
    not_: Exclusions | None = Field(default=None, alias="not")


class TriggerSpec(BaseModel):
    """One trigger: where events come from, which it takes, and the session they start."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=TRIGGER_ID_RE.pattern)
    source: Source
    mode: Mode
    events: list[str] = Field(min_length=1)
    filter: TriggerFilter | None = None
    secretEnv: str | None = Field(default=None, pattern=ENV_NAME)
    tokenEnv: str | None = Field(default=None, pattern=ENV_NAME)
    apiUrl: str | None = None
    repo: str | None = Field(default=None, min_length=1, max_length=300)
    interval: int = Field(default=60, ge=MIN_INTERVAL_SECONDS, le=86400)
    workflowId: str = Field(min_length=1, max_length=200)
    goal: str = Field(min_length=1)
    context: dict[str, Any] | None = None
    workspacePath: str = Field(min_length=1, max_length=4096)
    gates: Literal["skip", "steer"] = "skip"
    branchStrategy: BranchStrategy = "none"
    delivery: DeliveryMode = "commit"
    baseRef: str | None = Field(default=None, min_length=1, max_length=250, pattern=GIT_REV)
    keepWorktree: bool = False
    agentConfig: AgentConfig | None = None
    callbackUrl: str | None = None
    key: str | None = None  # a template; default: the item (repo#number), else the delivery
    steer: str | None = None  # a template: a steer's text; default: the event said in a line or two
    whileRunning: WhileRunning = "steer"
    reportBack: ReportBack = "none"

    @field_validator("events")
    @classmethod
    def _event_names(cls, events: list[str]) -> list[str]:
        for name in events:
            if not _matches(EVENT_NAME, name):
                raise ValueError(f"{name!r} is not an event name (event or event.action, lower case)")
        return events

    @field_validator("secretEnv", "tokenEnv")
    @classmethod
    def _not_a_system_variable(cls, name: str | None) -> str | None:
        if name in NOT_SECRETS:
            raise ValueError(f"{name} is not a secret's variable (the process needs it as it is)")
        return name

    @field_validator("workspacePath")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if "\x00" in value or not PurePosixPath(value).is_absolute():
            raise ValueError("must be an absolute path")
        return value

    @field_validator("apiUrl", "callbackUrl")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        return None if value is None else check_receiver_url(value).rstrip("/")

    @field_validator("agentConfig", mode="before")
    @classmethod
    def _known_agent_fields(cls, value: Any) -> Any:
        if isinstance(value, dict):
            unknown = sorted(set(value) - set(AgentConfig.model_fields))
            if unknown:
                raise ValueError(
                    f"unknown field {unknown[0]!r} (model, maxOutputTokens, thinkingBudgetTokens)"
                )
        return value

    @model_validator(mode="after")
    def _mode_needs(self) -> TriggerSpec:
        problems = mode_problems(self)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def api_url(self) -> str:
        return self.apiUrl or DEFAULT_API_URLS.get(self.source, "")


def _matches(pattern: str, value: str) -> bool:
    import re

    return re.fullmatch(pattern, value) is not None


def mode_problems(spec: TriggerSpec) -> list[str]:
    """What a mode, a source or reportBack needs and the entry lacks."""
    problems = []
    if spec.mode == "webhook" and spec.secretEnv is None:
        problems.append("a webhook trigger needs secretEnv (the variable holding its shared secret)")
    if spec.mode == "poll":
        if spec.source == "generic":
            problems.append("a generic trigger is a webhook: only github and gitlab can be polled")
        if spec.repo is None:
            problems.append("a poll trigger needs repo (owner/name on GitHub, the project on GitLab)")
        if spec.tokenEnv is None:
            problems.append("a poll trigger needs tokenEnv (the variable holding an API token)")
        wrong = sorted(set(spec.events) - POLL_EVENTS[spec.source])
        if wrong and spec.source != "generic":
            takes = ", ".join(sorted(POLL_EVENTS[spec.source]))
            problems.append(f"a {spec.source} poll lists {takes}, not {wrong[0]}")
    if spec.reportBack == "comment":
        if spec.source == "generic":
            problems.append("reportBack: comment needs a github or gitlab trigger")
        elif spec.tokenEnv is None:
            problems.append("reportBack: comment needs tokenEnv (the variable holding an API token)")
    return problems
