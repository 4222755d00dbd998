"""What goes on the RQ queue `worktrain` (daemon.keys.QUEUE_NAME): one place for the job
function, the job ids and the job timeout, shared by dispatch (web) and resume (worker).

The function is named by its dotted path, so the web tier never imports `worker`. A first
job's id is the session id; a resume job's is `<sessionId>-r<attempt>` (RQ ids allow only
`[A-Za-z0-9_-]`). RQ kills a job that outlives its timeout: the agent loop enforces the
workflow's own wall clock (SPEC §4.1), and the margin leaves it room to record the outcome.
"""

from __future__ import annotations

from daemon.workflows import WorkflowLimits

JOB_FUNCTION = "worker.jobs.run_session"
JOB_TIMEOUT_MARGIN_SECONDS = 600


def job_timeout(limits: WorkflowLimits) -> int:
    return int(limits.maxWallClockSeconds) + JOB_TIMEOUT_MARGIN_SECONDS


def resume_job_id(session_id: str, attempt: int) -> str:
    return f"{session_id}-r{attempt}"
