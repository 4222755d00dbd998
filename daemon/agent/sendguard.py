"""The model request's last check before its bytes leave (docs/durability.md).

`ModelCalls.once` guards before it takes a slot and before the call, but a thread can be
frozen (SIGSTOP, a VM pause) or slowed between that check and the send. So the check is
made again as close to the wire as the SDK lets code run: an HTTP `request` event hook on
the SDK's client (`make_client`), which httpx calls right before it sends the request.
The hook has no argument that says which session it is sending for; the call's `SendGate`
reaches it through a context variable that `ModelCalls.once` sets around the call (and
that `TurnInterrupt.abandonable` carries into the thread that makes the call).

A gate that refuses raises `SendRefused`, a BaseException, so that neither the SDK nor
httpx wraps it into a connection error that the retry policy would retry: `ModelCalls.once`
unwraps it and raises the fence's own exception (`Fenced`, `LeaseUnconfirmed`). A request
whose bytes already left cannot be recalled: that is the limit no worker-side check passes
(docs/durability.md).
"""

from __future__ import annotations

import contextvars
import ipaddress
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

# Which attempt sent a request (`<sessionId>/<attempt>`): for the fault tests, which compare
# it with the session record's attempt when the request arrives. Sent to a loopback base URL
# only (`is_loopback`): never to the real API or a provider.
ATTEMPT_HEADER = "x-worktrain-attempt"


class SendRefused(BaseException):
    """The gate refused the send; `cause` is the fence's exception (raise it instead)."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause


class SendGate:
    """One model call's check before each of its HTTP sends."""

    def __init__(
        self, guard: Callable[[], None], on_send: Callable[[], None] | None = None, attempt: str = ""
    ) -> None:
        self.guard = guard
        self.on_send = on_send  # after the guard passed, right before the bytes go
        self.attempt = attempt  # `<sessionId>/<attempt>`: sent as ATTEMPT_HEADER
        self.sends = 0

    def check(self, request: Any = None) -> None:
        try:
            self.guard()
            if self.on_send is not None:
                self.on_send()
        except Exception as exc:  # Fenced, LeaseUnconfirmed, a Redis error: nothing is sent
            raise SendRefused(exc) from exc
        self.sends += 1
        if request is not None and self.attempt and is_loopback(request.url.host):
            request.headers[ATTEMPT_HEADER] = self.attempt


def is_loopback(host: str | None) -> bool:
    """The header is ground truth for tests against a fake on this host: it never goes to the
    real API or a cloud provider (it names a session, and a signed request must not change)."""
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


_GATE: contextvars.ContextVar[SendGate | None] = contextvars.ContextVar("worktrain_send_gate", default=None)


@contextmanager
def gated(gate: SendGate) -> Iterator[SendGate]:
    """Every HTTP send of the SDK client made inside the block (in this context) passes `gate`."""
    token = _GATE.set(gate)
    try:
        yield gate
    finally:
        _GATE.reset(token)


def check_send(request: Any) -> None:
    """The `request` event hook of the SDK's HTTP client: the current gate, if any."""
    gate = _GATE.get()
    if gate is not None:
        gate.check(request)
