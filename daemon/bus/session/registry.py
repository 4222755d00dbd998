"""The session registry: records created at dispatch, read by the API, indexed by sorted sets.

A session is registered (status `queued`) before dispatch answers, so it can be steered
from the moment its id exists: there is no registration gap. Finished sessions stay
readable for the retention period (their keys expire, set by finish.lua / cancel.lua), and
their index entries expire with them: `mark_finished` moves a session from the active
index to `expiring` (scored by when its keys expire), and every listing first drops the
entries that are due, so `totalCount` counts readable sessions only.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import redis
from pydantic import BaseModel, ConfigDict

from daemon.bus.keys import Keys
from daemon.bus.replies import per_item
from daemon.host.clock import epoch_ms, utc_now_iso
from daemon.host.ids import is_session_id, new_session_id
from daemon.host.redisconn import as_text
from daemon.host.shortids import matches
from daemon.schema.records import ForkOf, SessionRecord, SessionStatus, TriggerOrigin
from daemon.schema.workspace import WorkspacePlan
from daemon.workflows.agentconfig import AgentConfig

LIST_CHUNK = 200
# An index entry leaves a little before the keys it names (never after): host clocks and
# the moment the worker marks the session differ from Redis's own clock by this much at most.
EXPIRY_MARGIN_MS = 60_000


def record_fields(client: redis.Redis, keys: Keys, session_id: str, *names: str) -> list[str | None]:
    """Some fields of a session's record in one HMGET, as text; None for a field (or a record)
    that is not there. The one place outside the scripts that reads record fields by name."""
    raw = client.hmget(keys.session(session_id).record, list(names))
    return [as_text(value) if value is not None else None for value in raw]


def record_exists(client: redis.Redis, keys: Keys, session_id: str) -> bool:
    """Whether the session's record exists (known, and not expired)."""
    return bool(client.exists(keys.session(session_id).record))


def index_expiry_ms(ttl_ms: int) -> int:
    """When an index entry for keys that expire in `ttl_ms` must leave (ms since the epoch)."""
    return epoch_ms() + ttl_ms - min(EXPIRY_MARGIN_MS, ttl_ms // 10)


class NewSession(BaseModel):
    """What dispatch registers."""

    model_config = ConfigDict(frozen=True)

    workflowId: str
    goal: str
    workspacePath: str
    context: dict[str, Any] | None = None
    stepCount: int = 0
    firstStepId: str | None = None
    firstStepTitle: str | None = None
    gates: Literal["skip", "steer"] = "skip"
    # a child of spawn_agent (README's Sub-agents and questions): its parent, the tree's root, its depth
    # (root: 0)
    parentSessionId: str | None = None
    rootSessionId: str | None = None
    depth: int = 0
    workspace: WorkspacePlan = WorkspacePlan()  # README's Coding sessions
    callbackUrl: str | None = None  # where its webhooks go (README's Webhooks); a child inherits it
    agentConfig: AgentConfig | None = None  # the model it runs, resolved (docs/DEVELOPING.md)
    trigger: TriggerOrigin | None = None  # the trigger that started it (README's Triggers)
    forkOf: ForkOf | None = None  # a fork (README's Fork a session): its source and turn


class SessionRegistry:
    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.client = client
        self.keys = keys

    def create(self, new: NewSession, pipeline: redis.client.Pipeline | None = None) -> str:
        """Register a queued session; with `pipeline=` the writes join the caller's pipeline."""
        session_id = new_session_id()
        keys = self.keys.session(session_id)
        record: dict[Any, str | int] = {
            "sessionId": session_id,
            "workflowId": new.workflowId,
            "goal": new.goal,
            "workspacePath": new.workspacePath,
            "context": json.dumps(new.context) if new.context is not None else "",
            "status": SessionStatus.QUEUED.value,
            "turnId": 0,
            "turnCount": 0,
            "stepId": new.firstStepId or "",
            "stepTitle": new.firstStepTitle or "",
            "gates": new.gates,
            "stepIndex": 0,
            "stepCount": new.stepCount,
            "steerOffset": 0,
            "deliveredOffset": 0,
            "createdAt": utc_now_iso(),
            "jobs": 1,  # dispatch enqueues job 1 (daemon.bus.jobspec.job_id)
            "jobPending": 1,  # ... which has not claimed the session yet (claim.lua clears it)
            **new.workspace.hash_fields(),
        }
        if new.agentConfig is not None:
            record["agentConfig"] = new.agentConfig.model_dump_json(exclude_none=True)
        if new.parentSessionId is not None:
            record["parentSessionId"] = new.parentSessionId
            record["rootSessionId"] = new.rootSessionId or new.parentSessionId
            record["depth"] = new.depth
        if new.callbackUrl is not None:
            record["callbackUrl"] = new.callbackUrl
        if new.trigger is not None:
            record["trigger"] = new.trigger.model_dump_json(exclude_none=True)
        if new.forkOf is not None:
            record["forkOf"] = new.forkOf.model_dump_json(exclude_none=True)
        score = epoch_ms()
        pipe = pipeline if pipeline is not None else self.client.pipeline(transaction=True)
        pipe.hset(keys.record, mapping=record)
        pipe.zadd(self.keys.sessions, {session_id: score})
        pipe.zadd(self.keys.active, {session_id: score})
        if pipeline is None:
            pipe.execute()
        return session_id

    def get(self, session_id: str) -> SessionRecord | None:
        if not is_session_id(session_id):
            return None
        return next(iter(self._records([session_id])), None)

    def list_sessions(
        self, status: SessionStatus | None = None, limit: int = 100, offset: int = 0
    ) -> tuple[list[SessionRecord], int]:
        """Newest first, with the total count. Ids whose record expired leave the index here.

        Entries whose keys have expired are dropped first (`prune`), so the total counts
        readable sessions only. Unfiltered, this reads one page (ZREVRANGE + one pipeline).
        A live status reads the small active index; a finished status reads the index in
        chunks, since counting them needs every record of the retention period.
        """
        self.prune()
        if status is None:
            total = int(self.client.zcard(self.keys.sessions))
            ids = self._ids(self.keys.sessions, offset, offset + limit - 1)
            records = self._records(ids)
            return records, total - (len(ids) - len(records))
        index = self.keys.sessions if status.finished else self.keys.active
        matching: list[SessionRecord] = []
        start = 0
        while ids := self._ids(index, start, start + LIST_CHUNK - 1):
            matching.extend(r for r in self._records(ids) if r.status == status)
            start += LIST_CHUNK
        return matching[offset : offset + limit], len(matching)

    def ids_matching(self, fragment: str, limit: int = 10) -> list[str]:
        """The ids (newest first, at most `limit`) that `fragment` starts or ends
        (daemon/host/shortids.py): how a shortened id is taken back. Reads the index in chunks."""
        found: list[str] = []
        start = 0
        while len(found) < limit and (ids := self._ids(self.keys.sessions, start, start + LIST_CHUNK - 1)):
            found.extend(sid for sid in ids if matches(sid, fragment))
            start += LIST_CHUNK
        return found[:limit]

    def get_many(self, session_ids: list[str]) -> list[SessionRecord]:
        """The readable records of these ids, in their order (one MULTI)."""
        return self._records([sid for sid in session_ids if is_session_id(sid)])

    def _ids(self, index: str, start: int, stop: int) -> list[str]:
        return [as_text(i) for i in self.client.zrevrange(index, start, stop)]

    def _records(self, ids: list[str]) -> list[SessionRecord]:
        """The records of `ids` in one MULTI (each record with its pending count as of one
        instant), in order; expired ids are dropped from the index."""
        pipe = self.client.pipeline(transaction=True)
        for session_id in ids:
            keys = self.keys.session(session_id)
            pipe.hgetall(keys.record)
            pipe.llen(keys.pending)
            pipe.llen(keys.inflight)
        replies = pipe.execute() if ids else []
        records: list[SessionRecord] = []
        expired: list[str] = []
        for session_id, (fields, pending, inflight) in zip(ids, per_item(replies, 3), strict=True):
            if fields:
                records.append(SessionRecord.from_hash(fields, int(pending) + int(inflight)))
            else:
                expired.append(session_id)
        if expired:
            self.forget(expired)
        return records

    def mark_finished(self, session_id: str, ttl_seconds: float) -> None:
        """A session finished and its keys expire in `ttl_seconds`: it leaves the active index,
        and its entry in `sessions` is due to leave with its keys."""
        pipe = self.client.pipeline(transaction=True)
        pipe.zrem(self.keys.active, session_id)
        pipe.zadd(self.keys.expiring, {session_id: index_expiry_ms(int(ttl_seconds * 1000))})
        pipe.execute()

    def forget(self, session_ids: list[str]) -> None:
        """Remove sessions whose keys are gone from every index."""
        pipe = self.client.pipeline(transaction=True)
        for index in (self.keys.sessions, self.keys.active, self.keys.expiring):
            pipe.zrem(index, *session_ids)
        pipe.execute()

    def prune(self) -> list[str]:
        """Drop the index entries whose sessions' keys have expired; returns their ids."""
        due = [as_text(i) for i in self.client.zrangebyscore(self.keys.expiring, "-inf", epoch_ms())]
        if due:
            self.forget(due)
        return due

    def status_counts(self) -> dict[str, int]:
        """How many readable sessions are in each status (the fleet view): every index
        entry's status, read in chunks of pipelined HGETs."""
        counts = {status.value: 0 for status in SessionStatus}
        start = 0
        while ids := self._ids(self.keys.sessions, start, start + LIST_CHUNK - 1):
            pipe = self.client.pipeline(transaction=False)
            for session_id in ids:
                pipe.hget(self.keys.session(session_id).record, "status")
            for status in pipe.execute():
                if status is not None and as_text(status) in counts:
                    counts[as_text(status)] += 1
            start += LIST_CHUNK
        return counts
