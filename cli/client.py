"""A small HTTP client for the WorkTrain API (README's HTTP API), on the standard library only.

Client commands must start fast (`worktrain steer` answers in well under half a second), so
this module imports neither an HTTP library nor anything from `daemon/`: `http.client` and
`json` are enough for JSON in, JSON out and one Server-Sent Events stream.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

DEFAULT_URL = "http://127.0.0.1:3456"
# The same pattern as daemon.host.ids.SESSION_ID_RE (a test keeps them equal); copied because
# importing daemon.host.ids pulls in the ulid package, which costs ~60 ms at every start.
SESSION_ID_RE = re.compile(r"^sess_[0-9A-HJKMNP-TV-Z]{26}$")


class ExitCode(IntEnum):
    """Exit codes of the client commands (documented in the README and in `--help`)."""

    OK = 0
    ERROR = 1  # anything else: a 5xx, a reply that is not WorkTrain's JSON, ...
    USAGE = 2  # bad arguments (click's own code), including a malformed session id
    UNREACHABLE = 3  # no answer from WORKTRAIN_URL: refused, timed out, unknown host
    UNAUTHORIZED = 4  # 401: WORKTRAIN_API_TOKEN missing or wrong
    NOT_FOUND = 5  # 404: unknown or finished session, unknown route
    CONFLICT = 6  # 409: stale_turn / no_live_turn
    UNPROCESSABLE = 7  # 422: client_msg_id_reuse
    BAD_REQUEST = 8  # 400, 413, 415: the server refused the request as invalid
    UNAVAILABLE = 9  # 503: Redis down (steer_bus_unavailable) or no steer channel
    NOT_DELIVERED = 10  # --wait: the steer was retracted, or the session ended first (undelivered)
    STILL_PENDING = 11  # --wait: still pending when the wait ran out


EXIT_CODES_HELP = (
    "Exit codes: 0 ok, 1 other error, 2 usage, 3 server unreachable, 4 unauthorized (401), "
    "5 not found (404), 6 conflict (409), 7 unprocessable (422), 8 bad request (400/413/415), "
    "9 unavailable (503)."
)
# only `steer --wait` ends in these (issue 33: the other commands' help listed them too)
WAIT_EXIT_CODES_HELP = (
    EXIT_CODES_HELP[:-1]
    + ", 10 not delivered (--wait: retracted or undelivered), 11 still pending (--wait ran out)."
)

_STATUS_EXIT = {
    400: ExitCode.BAD_REQUEST,
    401: ExitCode.UNAUTHORIZED,
    404: ExitCode.NOT_FOUND,
    409: ExitCode.CONFLICT,
    413: ExitCode.BAD_REQUEST,
    415: ExitCode.BAD_REQUEST,
    422: ExitCode.UNPROCESSABLE,
    503: ExitCode.UNAVAILABLE,
}


@dataclass
class ApiError(Exception):
    """A request that did not succeed; `body` is the server's JSON error body when there is one."""

    message: str
    exit_code: ExitCode = ExitCode.ERROR
    status: int | None = None
    body: dict[str, Any] = field(default_factory=dict)
    retry_after: str | None = None  # the Retry-After header of a 429/503

    def __str__(self) -> str:
        return self.message

    @property
    def code(self) -> str | None:
        code = self.body.get("code")
        return code if isinstance(code, str) else None

    def json_body(self) -> dict[str, Any]:
        """What `--json` prints: the server's body, or one in the same shape for local errors."""
        if self.body:
            return self.body
        return {"success": False, "code": "unreachable", "error": self.message}


def _error_message(status: int, body: dict[str, Any], retry_after: str | None) -> str:
    code = body.get("code") or "error"
    text = str(body.get("error") or http.client.responses.get(status, "request failed"))
    if code == "stale_turn" and "currentTurnId" in body:
        text += f" (you expected turn {body.get('expectedTurnId')}, the live turn is {body['currentTurnId']})"
    if status == 401:
        text += " Set WORKTRAIN_API_TOKEN (or --token) to the server's token."
    if retry_after:
        text += f" Retry after {retry_after}s."
    return f"{text} [{status} {code}]"


def api_error(status: int, body: dict[str, Any], retry_after: str | None = None) -> ApiError:
    exit_code = _STATUS_EXIT.get(status, ExitCode.ERROR)
    return ApiError(_error_message(status, body, retry_after), exit_code, status, body, retry_after)


@dataclass(frozen=True)
class SseEvent:
    """One Server-Sent Event: its id, event name and decoded JSON data."""

    id: str | None
    event: str
    data: Any


def default_data_dir() -> Path:
    """`WORKTRAIN_DATA_DIR` (a leading `~` expanded), else `~/.worktrain`: where `worktrain up`
    keeps its data and its `up.json`, so both `up` and the client commands use this."""
    raw = os.environ.get("WORKTRAIN_DATA_DIR")
    return Path(raw).expanduser() if raw else Path.home() / ".worktrain"


def running_up_url(data_dir: Path | None = None) -> str | None:
    """The API URL of the `worktrain up` running on this data dir, if one is."""
    state_path = (data_dir or default_data_dir()) / "up.json"
    try:
        state = json.loads(state_path.read_text())
        os.kill(int(state["pid"]), 0)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    url = state.get("apiUrl")
    return url if isinstance(url, str) else None


def up_token(url: str, data_dir: Path | None = None) -> str | None:
    """The token of the `worktrain up` running on this machine's data dir, when `url` is that
    `up`'s own (loopback) URL: the CLI, `console` and `mcp` then just work (docs/security.md).
    Never for another URL: the token must not travel to a server that is not that `up`."""
    from daemon.host.apitoken import read_token  # standard library only

    data_dir = data_dir or default_data_dir()
    up_url = running_up_url(data_dir)
    if up_url is None or up_url.rstrip("/") != url.rstrip("/"):
        return None
    host = (urlsplit(url).hostname or "").lower()
    if host not in ("127.0.0.1", "localhost", "::1"):
        return None
    return read_token(data_dir)


def resolve_url(explicit: str | None) -> str:
    """`--url` / `WORKTRAIN_URL`, else the running `worktrain up`'s URL, else the default."""
    return (explicit or running_up_url() or DEFAULT_URL).rstrip("/")


class Client:
    """JSON requests against one WorkTrain server, on one kept-alive connection."""

    def __init__(self, base_url: str, token: str | None = None, timeout: float = 10.0) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ApiError(f"not an http(s) URL: {base_url!r} (check WORKTRAIN_URL)", ExitCode.USAGE)
        self.base_url = base_url
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path.rstrip("/")
        self.token = token
        self.timeout = timeout
        self._conn: http.client.HTTPConnection | None = None

    def _connect(self, timeout: float | None) -> http.client.HTTPConnection:
        if self.scheme == "https":
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def _headers(self, extra: dict[str, str] | None = None) -> dict[str, str | bytes]:
        headers: dict[str, str | bytes] = {"Accept": "application/json", "User-Agent": "worktrain-cli"}
        if self.token:
            # UTF-8 bytes, as curl sends them and the server compares them (web/auth.py);
            # http.client would encode a str as latin-1, or fail beyond it.
            headers["Authorization"] = f"Bearer {self.token}".encode()
        headers.update(extra or {})
        return headers

    def _unreachable(self, exc: BaseException) -> ApiError:
        reason = "timed out" if isinstance(exc, TimeoutError) else str(exc) or type(exc).__name__
        return ApiError(
            f"cannot reach WorkTrain at {self.base_url} ({reason}). "
            "Is `worktrain up` running? Set WORKTRAIN_URL or --url to point elsewhere.",
            ExitCode.UNREACHABLE,
        )

    def path(self, path: str, query: dict[str, Any] | None = None) -> str:
        clean = {k: v for k, v in (query or {}).items() if v is not None and v != ""}
        return self.prefix + path + (f"?{urlencode(clean)}" if clean else "")

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: dict[str, Any] | None = None,
        timeout: float | None = None,
        headers: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """Send one request; return the JSON body of a 2xx, raise ApiError otherwise.
        `timeout` replaces the client's for this request (a long poll's)."""
        payload = None if body is None else json.dumps(body).encode()
        # A state change is always declared JSON, body or not: the server refuses it otherwise
        # (415), which is what keeps a cross-site page's no-cors POST out (web/auth.py).
        json_declared = payload is not None or method in ("POST", "PATCH", "DELETE")
        extra = {"Content-Type": "application/json"} if json_declared else {}
        sent = self._headers({**extra, **(headers or {})})
        status, raw, retry_after = self._exchange(method, self.path(path, query), payload, sent, timeout)
        try:
            decoded = json.loads(raw) if raw else {}
        except ValueError:
            decoded = None
        if not isinstance(decoded, dict):
            raise ApiError(
                f"{self.base_url} answered {status} with a body that is not WorkTrain's JSON "
                "(is WORKTRAIN_URL pointing at WorkTrain?)",
                _STATUS_EXIT.get(status, ExitCode.ERROR),
                status,
            )
        if 200 <= status < 300 and decoded.get("success", True) is not False:
            return decoded
        raise api_error(status, decoded, retry_after)

    def _exchange(
        self,
        method: str,
        target: str,
        payload: bytes | None,
        headers: Mapping[str, str | bytes],
        timeout: float | None = None,
    ) -> tuple[int, bytes, str | None]:
        for attempt in (1, 2):
            if self._conn is None:
                self._conn = self._connect(self.timeout)
            try:
                self._conn.timeout = timeout or self.timeout  # used if it (re)connects
                if self._conn.sock is not None:
                    self._conn.sock.settimeout(timeout or self.timeout)
                self._conn.request(method, target, body=payload, headers=headers)
                response = self._conn.getresponse()
                return response.status, response.read(), response.getheader("Retry-After")
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as exc:
                # A kept-alive connection the server closed: retry once on a fresh one.
                self.close()
                if attempt == 2:
                    raise self._unreachable(exc) from exc
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                raise self._unreachable(exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def get(self, path: str, timeout: float | None = None, **query: Any) -> dict[str, Any]:
        return self.request("GET", path, query=query, timeout=timeout)

    def post(self, path: str, body: Any, headers: dict[str, str] | None = None) -> dict[str, Any]:
        return self.request("POST", path, body=body, headers=headers)

    def patch(self, path: str, body: Any) -> dict[str, Any]:
        return self.request("PATCH", path, body=body)

    def delete(self, path: str) -> dict[str, Any]:
        return self.request("DELETE", path)

    def wait_for_steer(
        self,
        session_id: str,
        offset: int,
        seconds: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> dict[str, Any]:
        """The steer once it is no longer `pending` (delivered, undelivered, retracted), or
        as it is when `seconds` have passed: long polls of `GET .../steers/<offset>?wait=`,
        at most WAIT_CHUNK seconds each (the server's cap). A server whose waits are all
        taken (503 too_many_waits) is asked again after its Retry-After."""
        deadline = clock() + max(seconds, 0.0)
        path = f"/api/v2/sessions/{session_id}/steers/{offset}"
        while True:
            chunk = round(min(max(deadline - clock(), 0.0), WAIT_CHUNK), 3)
            try:
                steer: dict[str, Any] = self.get(path, wait=chunk or None, timeout=chunk + 10)["data"]
            except ApiError as exc:
                pause = _seconds(exc.retry_after)
                if exc.code != "too_many_waits" or clock() + pause >= deadline:
                    raise
                sleep(pause)
                continue
            if steer.get("state") != "pending" or clock() >= deadline:
                return steer

    def events_stream(self, path: str, last_event_id: str | None = None) -> Iterator[SseEvent]:
        """Read a Server-Sent Events route until the server ends the stream."""
        extra = {"Accept": "text/event-stream"}
        if last_event_id:
            extra["Last-Event-ID"] = last_event_id
        conn = self._connect(None)  # a stream may stay quiet for long: no read timeout
        try:
            try:
                conn.request("GET", self.path(path), headers=self._headers(extra))
                response = conn.getresponse()
            except (OSError, http.client.HTTPException) as exc:
                raise self._unreachable(exc) from exc
            if response.status != 200:
                raw = response.read()
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = {}
                raise api_error(response.status, body if isinstance(body, dict) else {})
            yield from parse_sse(response)
        finally:
            conn.close()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


WAIT_CHUNK = 60.0  # the longest ?wait= the server honours (README's Managing steers)


def steer_body(text: str, expected_turn: int | None, client_msg_id: str | None, mode: str) -> dict[str, Any]:
    """The JSON of `POST .../steer` (README's HTTP API, README's Managing steers): the optional fields
    only when given."""
    body: dict[str, Any] = {"text": text}
    if expected_turn is not None:
        body["expectedTurnId"] = expected_turn
    if client_msg_id is not None:
        body["clientMsgId"] = client_msg_id
    if mode != "queue":
        body["mode"] = mode
    return body


def _seconds(retry_after: str | None, default: float = 1.0) -> float:
    try:
        return max(float(retry_after), 0.0) if retry_after else default
    except ValueError:
        return default


def parse_sse(response: Any) -> Iterator[SseEvent]:
    """Decode `id:` / `event:` / `data:` lines into events (a blank line ends one)."""
    event_id: str | None = None
    name = "message"
    data: list[str] = []
    while True:
        raw = response.readline()
        if not raw:
            return
        line = raw.decode("utf-8").rstrip("\r\n")
        if line == "":
            if data:
                text = "\n".join(data)
                try:
                    decoded: Any = json.loads(text)
                except ValueError:
                    decoded = text
                yield SseEvent(event_id, name, decoded)
            name, data = "message", []
            continue
        if line.startswith(":"):
            continue  # a comment: keep-alive
        key, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if key == "data":
            data.append(value)
        elif key == "event":
            name = value
        elif key == "id":
            event_id = value
