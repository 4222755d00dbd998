"""`worktrain session ID`'s readable summary (issue 33): a dozen labelled lines a person reads,
instead of every raw field of the record (`--json` prints the record as the API answers it)."""

from __future__ import annotations

from typing import Any

from cli.output import tokens


def _status(d: dict[str, Any]) -> str:
    status = str(d.get("status") or "?")
    if d.get("waitingFor"):
        status += f" (waiting for {d['waitingFor']})"
    if d.get("cancelRequested") and status in ("running", "waiting"):
        status += ", cancel requested"
    if d.get("outcome"):
        status += f" — {d['outcome']}" + (f": {d['outcomeDetail']}" if d.get("outcomeDetail") else "")
    return status


def _step(d: dict[str, Any]) -> str:
    count = int(d.get("stepCount") or 0)
    if not count:
        return "-"
    at = min(int(d.get("stepIndex") or 0) + 1, count)
    title = d.get("stepTitle") or d.get("stepId") or ""
    return f"{at}/{count}" + (f" · {title}" if title else "")


def _turn(d: dict[str, Any]) -> str:
    so_far = int(d.get("turnCount") or 0)
    return (
        f"live turn {d['turnId']} ({so_far} so far)" if d.get("turnId") else f"no live turn ({so_far} so far)"
    )


def _tokens(d: dict[str, Any]) -> str:
    def n(key: str) -> int:
        return int(d.get(key) or 0)

    # "in" is every prompt token: the API's inputTokens are only the uncached ones (a handful)
    prompt = n("inputTokens") + n("cacheReadTokens") + n("cacheWriteTokens")
    return (
        f"{tokens(prompt)} in ({tokens(n('cacheReadTokens'))} cache read · "
        f"{tokens(n('cacheWriteTokens'))} cache write · {tokens(n('inputTokens'))} uncached) · "
        f"{tokens(n('outputTokens'))} out"
    )


def _model(d: dict[str, Any]) -> str:
    """The model it runs, its thinking budget and output cap (README's Models, thinking and cost)."""
    config = d.get("agentConfig") or {}
    model = str(config.get("model") or "the worker's default")
    budget = config.get("thinkingBudgetTokens")
    thinking = "" if budget is None else " · thinking off" if not budget else f" · thinking {budget:,} tokens"
    cap = config.get("maxOutputTokens")
    return model + thinking + (f" · max output {cap:,} tokens" if cap else "")


def _cost(d: dict[str, Any]) -> str:
    """`costUsd` in full, or why there is none (a model the price table does not know)."""
    cost = d.get("costUsd")
    if isinstance(cost, int | float):
        return f"${cost:.6f}"
    if not (d.get("inputTokens") or d.get("outputTokens")):
        return "$0 (no model call yet)"
    model = (d.get("agentConfig") or {}).get("model")
    return f"unknown ({model} is not in the price table)" if model else "unknown"


def delivery_text(d: dict[str, Any]) -> str:
    """What a worktree session's end did with its work; the delivery's own branch (the
    record's `branch` is only the one asked for at dispatch, often none)."""
    delivery = d.get("delivery")
    strategy = d.get("branchStrategy") or "none"
    if not delivery:
        return f"{strategy} (not delivered yet)" if strategy != "none" else "-"
    parts = [str(delivery.get("state")), f"branch {delivery.get('branch')}"]
    if delivery.get("headCommit"):
        parts.append(
            f"commit {str(delivery['headCommit'])[:12]} "
            f"({delivery.get('commits', 0)} since {base_text(delivery)})"
        )
    parts.append(f"pushed to {delivery.get('remote')}" if delivery.get("pushed") else "not pushed")
    if delivery.get("worktree"):
        parts.append(f"worktree kept: {delivery['worktree']}")
    if delivery.get("error"):
        parts.append(f"error: {delivery['error']}")
    return " · ".join(parts)


def base_text(delivery: dict[str, Any]) -> str:
    """The base as a commit (a named ref beside it); `HEAD` alone says nothing afterwards."""
    ref, commit = delivery.get("baseRef") or "HEAD", delivery.get("baseCommit")
    if not commit:
        return str(ref)
    return str(commit)[:12] + (f" ({ref})" if ref != "HEAD" else "")


def summary_rows(d: dict[str, Any]) -> list[tuple[str, str]]:
    rows = [
        ("status", _status(d)),
        ("workflow", str(d.get("workflowId") or "-")),
        ("step", _step(d)),
        ("turn", _turn(d)),
        ("goal", str(d.get("goal") or "-")),
        ("workspace", str(d.get("workspacePath") or "-")),
        ("pending steers", str(d.get("pendingSteers") or 0)),
        ("created", str(d.get("createdAt") or "-")),
        ("started", str(d.get("startedAt") or "-")),
        ("ended", str(d.get("endedAt") or "-")),
        (
            "worker",
            f"{d['worker']}" + (f" (attempt {d['attempt']})" if (d.get("attempt") or 1) > 1 else "")
            if d.get("worker")
            else "-",
        ),
        ("model", _model(d)),
        ("tokens", _tokens(d)),
        ("cost", _cost(d)),
    ]
    if (d.get("branchStrategy") or "none") != "none":
        rows.append(("delivery", delivery_text(d)))
    if d.get("children"):
        rows.append(("sub-agents", f"{len(d['children'])} (worktrain session {d['sessionId']} --tree)"))
    if d.get("forkOf"):  # README's Fork a session
        rows.append(("fork of", f"{d['forkOf'].get('sessionId')} after turn {d['forkOf'].get('turn')}"))
    if d.get("forks"):
        rows.append(("forks", ", ".join(f"{f.get('sessionId')} (turn {f.get('turn')})" for f in d["forks"])))
    if d.get("pendingQuestion"):
        rows.append(("question", str(d["pendingQuestion"].get("summary") or "")))
    if d.get("compactions"):
        rows.append(("compactions", str(d["compactions"])))
    return rows
