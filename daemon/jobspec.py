"""What goes on the RQ queue `worktrain` (daemon.keys.QUEUE_NAME): one place for the job
function, the job ids and the job timeout, shared by dispatch (web) and resume (worker).

The function is named by its dotted path, so the web tier never imports `worker`. A session
counts the jobs enqueued for it (record field `jobs`): job 1 (dispatch) has the session id
as its id, job n > 1 (a hand-over, or the reaper's re-enqueue) `<sessionId>-r<n>` (RQ ids
allow only `[A-Za-z0-9_-]`), so two enqueues never share an id. RQ kills a job that
outlives its timeout: the agent loop enforces the workflow's own wall clock (SPEC §4.1),
and the margin leaves it room to record the outcome.
"""

from __future__ import annotations

from daemon.workflows import WorkflowLimits

JOB_FUNCTION = "worker.jobs.run_session"
JOB_TIMEOUT_MARGIN_SECONDS = 600


def job_timeout(limits: WorkflowLimits) -> int:
    return int(limits.maxWallClockSeconds) + JOB_TIMEOUT_MARGIN_SECONDS


def job_id(session_id: str, number: int) -> str:
    """The RQ job id of the session's `number`-th job (1: dispatch's)."""
    return session_id if number <= 1 else f"{session_id}-r{number}"
