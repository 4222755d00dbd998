"""What WorkTrain uses of RQ beyond its documented API is still what WorkTrain was written
against (docs/DEVELOPING.md, "What WorkTrain uses of RQ beyond its documented API").

RQ's worker loop, its hooks and its Redis layout are not documented; WorkTrain's workers
override, call and write them. Each name is recorded here with its signature as RQ had it
(parameters and defaults, no annotations), the RQ code that must still call it for an
override to take effect, and, where WorkTrain copies or replaces a method's body, a
fingerprint of RQ's body. A new RQ that changes any of them fails here, naming it; so does a
WorkTrain class that overrides an RQ method, or a worker module that names an RQ private, not
recorded here, and a docs table that lists other names. No process, no socket: fakeredis.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import pkgutil
import re
import tomllib
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import fakeredis
import pytest
import rq.exceptions
import rq.executions
from packaging.requirements import Requirement
from rq.executions import Execution
from rq.intermediate_queue import IntermediateQueue
from rq.job import Job, JobStatus
from rq.queue import Queue
from rq.registry import FailedJobRegistry
from rq.results import Result
from rq.scheduler import RQScheduler
from rq.timeouts import BaseDeathPenalty
from rq.worker import BaseWorker, Worker
from rq.worker_pool import WorkerPool

import worker
from daemon.bus.jobspec import queue_key
from daemon.bus.keys import QUEUE_NAME
from worker.dequeue import RQ_DEFAULT_BLOCK_SECONDS
from worker.pool import pooled_worker_class
from worker.threaded import threaded_worker_class

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
RQ_CHECKED = "3.0.0"  # the RQ every record below was read from

PROPERTY = "property"
ATTRIBUTE = "attribute"  # on the class or, set by __init__, on an instance
CLASS = "class"


@dataclass(frozen=True)
class Seam:
    name: str  # "<owner>.<name>", as in the docs table
    signature: str  # "(self, ...)" for a callable, else PROPERTY / ATTRIBUTE / CLASS
    called_from: tuple[str, ...] = ()  # RQ code that must still name it (an override's hook)
    body: str = ""  # sha256 of RQ's source, 12 digits, where WorkTrain copies or replaces it


SEAMS = [
    Seam("BaseWorker._install_signal_handlers", "(self)", ("BaseWorker.work",)),
    Seam("BaseWorker._stop_requested", ATTRIBUTE, ("BaseWorker.work",)),
    Seam("BaseWorker._shutdown", "(self)", ("BaseWorker.request_stop",), body="828be105b616"),
    Seam("WorkerPool._install_signal_handlers", "(self)", ("WorkerPool.start",)),
    Seam("WorkerPool.start", "(self, burst=False, logging_level='INFO')"),
    Seam(
        "WorkerPool.request_stop",
        "(self, signum=None, frame=None)",
        ("WorkerPool._install_signal_handlers",),
    ),
    Seam(
        "WorkerPool.__init__",
        "(self, queues, connection, num_workers=1, worker_class=<class 'rq.worker.worker_classes.Worker'>, "
        "serializer=<class 'rq.serializers.DefaultSerializer'>, job_class=<class 'rq.job.Job'>, "
        "queue_class=<class 'rq.queue.Queue'>, exception_handlers=None, *args, **kwargs)",
    ),
    Seam(
        "BaseWorker.work",
        "(self, burst=False, logging_level=None, date_format='%H:%M:%S', "
        "log_format='%(asctime)s %(message)s', max_jobs=None, max_idle_time=None, with_scheduler=False, "
        "dequeue_strategy=<DequeueStrategy.DEFAULT: 'default'>)",
    ),
    Seam(
        "BaseWorker.dequeue_job_and_maintain_ttl", "(self, timeout, max_idle_time=None)", ("BaseWorker.work",)
    ),
    Seam("BaseWorker.execute_job", "(self, job, queue)", ("BaseWorker.work",)),
    Seam("Worker.execute_job", "(self, job, queue)", ("BaseWorker.work",)),
    Seam("BaseWorker.main_work_horse", "(self, job, queue)", ("Worker.fork_work_horse",)),
    Seam("BaseWorker.prepare_execution", "(self, job)"),
    Seam("BaseWorker.perform_job", "(self, job, queue, execution)"),
    Seam("BaseWorker.executions", ATTRIBUTE, ("executions.prepare_execution",)),
    Seam(
        "BaseWorker.set_state",
        "(self, state, pipeline=None)",
        ("BaseWorker.dequeue_job_and_maintain_ttl", "executions.prepare_execution"),
    ),
    Seam(
        "BaseWorker.get_heartbeat_ttl",
        "(self, job, working_time=0.0)",
        ("executions.prepare_execution", "BaseWorker.prepare_job_execution"),
        body="8878c9689380",
    ),
    Seam("BaseWorker.maintain_heartbeats", "(self, job, execution)", body="b73451c9b97f"),
    Seam("BaseWorker.heartbeat", "(self, timeout=None, pipeline=None)"),
    Seam("Execution.heartbeat", "(self, started_job_registry, ttl, pipeline)"),
    Seam("Job.heartbeat", "(self, timestamp, ttl, pipeline=None, xx=False)"),
    Seam("Job.started_job_registry", PROPERTY),
    Seam("BaseWorker.handle_warm_shutdown_request", "(self)", ("BaseWorker.request_stop",)),
    Seam("BaseWorker.request_force_stop", "(self, signum, frame)", ("BaseWorker.request_stop",)),
    Seam("BaseWorker.teardown", "(self)", ("BaseWorker.work",)),
    Seam("BaseWorker.stop_scheduler", "(self)", ("BaseWorker.teardown",), body="b90d9019bcaf"),
    Seam("BaseWorker.scheduler", ATTRIBUTE),
    Seam("RQScheduler._process", ATTRIBUTE, ("RQScheduler.start",)),
    Seam("BaseWorker.set_shutdown_requested_date", "(self)", ("BaseWorker._shutdown",)),
    Seam("BaseWorker.horse_pid", PROPERTY),
    Seam("BaseWorker.procline", "(self, message)", ("BaseWorker.dequeue_job_and_maintain_ttl",)),
    Seam("BaseWorker.dequeue_timeout", PROPERTY, ("BaseWorker.work",)),
    Seam("BaseWorker.connection_timeout", PROPERTY, ("BaseWorker._set_connection",)),
    Seam("BaseWorker.death_penalty_class", ATTRIBUTE, ("BaseWorker.perform_job",)),
    Seam("BaseDeathPenalty.setup_death_penalty", "(self)", ("BaseDeathPenalty.__enter__",)),
    Seam("BaseDeathPenalty.cancel_death_penalty", "(self)", ("BaseDeathPenalty.__exit__",)),
    Seam("exceptions.StopRequested", CLASS, ("BaseWorker.work",)),
    Seam("Job._success_callback_name", ATTRIBUTE, ("Job.restore", "Job.success_callback")),
    Seam("Job._failure_callback_name", ATTRIBUTE, ("Job.restore", "Job.failure_callback")),
    Seam("Job._stopped_callback_name", ATTRIBUTE, ("Job.restore", "Job.stopped_callback")),
    Seam("Job.set_status", "(self, status, pipeline=None)"),
    Seam("FailedJobRegistry.add", "(self, job, ttl=None, exc_string='', pipeline=None)"),
    Seam(
        "Result.create_failure",
        "(job, ttl, exc_string, worker_name='', pipeline=None, execution_id=None, "
        "execution_started_at=None, execution_ended_at=None)",
    ),
    Seam("Queue.intermediate_queue_key", PROPERTY),
    Seam("Queue.key", PROPERTY),
    Seam("Job.key_for", "(job_id)"),
    Seam("Queue.redis_queue_namespace_prefix", ATTRIBUTE),
]

OWNERS: dict[str, Any] = {
    "BaseWorker": BaseWorker,
    "Worker": Worker,
    "WorkerPool": WorkerPool,
    "RQScheduler": RQScheduler,
    "BaseDeathPenalty": BaseDeathPenalty,
    "Execution": Execution,
    "Job": Job,
    "Queue": Queue,
    "FailedJobRegistry": FailedJobRegistry,
    "Result": Result,
    "exceptions": rq.exceptions,
    "executions": rq.executions,
}

# WorkTrain's own privates that share a name with some RQ class's (never with the RQ class
# that WorkTrain's class derives from: test_own_privates_shadow_nothing_of_rqs)
OWN_PRIVATES = {"_burst": "ThreadedSessionWorker's (a BaseWorker); RQ's WorkerPool has one of its own"}


def instances() -> dict[str, Any]:
    """One of each RQ class whose instance attributes WorkTrain uses (fakeredis: no socket)."""
    connection = fakeredis.FakeRedis()
    queue = Queue(QUEUE_NAME, connection=connection)
    return {
        "BaseWorker": BaseWorker([queue], connection=connection),
        "Worker": Worker([queue], connection=connection),
        "WorkerPool": WorkerPool([queue], connection=connection),
        "RQScheduler": RQScheduler([queue], connection=connection),
        "Job": Job(id="x", connection=connection),
        "Queue": queue,
    }


def bare_signature(function: Callable[..., Any]) -> str:
    """Parameters and defaults: what a caller or an override depends on (annotations are not)."""
    signature = inspect.signature(function)
    parameters = [p.replace(annotation=inspect.Parameter.empty) for p in signature.parameters.values()]
    return str(signature.replace(parameters=parameters, return_annotation=inspect.Signature.empty))


def function_of(static: Any) -> Any:
    if isinstance(static, property):
        return static.fget
    if isinstance(static, staticmethod | classmethod):
        return static.__func__
    return static


def resolve(name: str) -> tuple[Any, str, Any]:
    """(owner, attribute, its static value or None when RQ no longer has it)."""
    owner_name, attribute = name.split(".", 1)
    owner = OWNERS[owner_name]
    return owner, attribute, inspect.getattr_static(owner, attribute, None)


def shape(name: str) -> str:
    """What RQ has under `name` now: a bare signature, PROPERTY, ATTRIBUTE, CLASS or "missing"."""
    owner, attribute, static = resolve(name)
    if static is None:
        built = instances().get(name.split(".", 1)[0])
        return ATTRIBUTE if built is not None and attribute in vars(built) else "missing"
    if isinstance(static, property):
        return PROPERTY
    if isinstance(static, types.FunctionType | staticmethod | classmethod):
        return bare_signature(getattr(owner, attribute))
    if isinstance(owner, types.ModuleType) and inspect.isclass(static):
        return CLASS
    return ATTRIBUTE


def source_of(name: str) -> str:
    _, _, static = resolve(name)
    assert static is not None, f"RQ has no {name} any more"
    return inspect.getsource(function_of(static))


@pytest.mark.parametrize("seam", SEAMS, ids=lambda seam: seam.name)
def test_rq_still_has_what_worktrain_was_written_against(seam: Seam) -> None:
    where = f"(rq {version('rq')}; WorkTrain was written against rq {RQ_CHECKED}, docs/DEVELOPING.md)"
    now = shape(seam.name)
    assert now == seam.signature, f"RQ's {seam.name} is now {now}, not {seam.signature} {where}"
    for caller in seam.called_from:
        short = seam.name.rsplit(".", 1)[1]
        assert re.search(rf"(?<!\w){re.escape(short)}(?!\w)", source_of(caller)), (
            f"RQ's {caller} no longer uses {seam.name}: WorkTrain's override may not take effect {where}"
        )
    if seam.body:
        digest = hashlib.sha256(source_of(seam.name).encode()).hexdigest()[:12]
        assert digest == seam.body, (
            f"RQ's {seam.name} changed (body {digest}, not {seam.body}): WorkTrain copies or replaces it, "
            f"re-read it {where}"
        )


def worktrain_rq_classes() -> Iterator[type]:
    """Every class of worker/ that derives from an RQ class, the factories' included."""
    for module_info in pkgutil.iter_modules(worker.__path__, "worker."):
        module = importlib.import_module(module_info.name)
        for value in vars(module).values():
            if inspect.isclass(value) and value.__module__ == module.__name__ and rq_bases(value):
                yield value
    yield pooled_worker_class(1)
    yield threaded_worker_class(1, 2)


def rq_bases(cls: type) -> list[type]:
    return [base for base in cls.__mro__ if base.__module__.split(".")[0] == "rq"]


def test_every_override_of_rq_by_worktrain_is_recorded() -> None:
    recorded = {seam.name for seam in SEAMS}
    unrecorded = set()
    for cls in worktrain_rq_classes():
        ours = [base for base in cls.__mro__ if base.__module__.split(".")[0] == "worker"]
        for base in ours:
            for attribute in vars(base):
                if attribute.startswith("__"):  # __init__(*args, **kwargs) passes everything on
                    continue
                owners = [rq_base for rq_base in rq_bases(cls) if attribute in vars(rq_base)]
                if owners and f"{owners[0].__name__}.{attribute}" not in recorded:
                    unrecorded.add(f"{owners[0].__name__}.{attribute} (overridden by {base.__qualname__})")
    missing = ", ".join(sorted(unrecorded))
    assert not unrecorded, (
        f"WorkTrain overrides RQ names recorded neither here nor in docs/DEVELOPING.md: {missing}"
    )


def rq_privates() -> dict[str, list[str]]:
    privates: dict[str, list[str]] = {}
    built = instances()
    for owner_name, owner in OWNERS.items():
        names = set(dir(owner)) | set(vars(built[owner_name]) if owner_name in built else ())
        for name in names:
            if name.startswith("_") and not name.startswith("__"):
                privates.setdefault(name, []).append(owner_name)
    return privates


def test_every_rq_private_named_in_worker_is_recorded() -> None:
    privates = rq_privates()
    recorded = {seam.name.rsplit(".", 1)[1] for seam in SEAMS}
    unrecorded = []
    for path in [*sorted((ROOT / "worker").glob("*.py")), ROOT / "daemon/bus/lua/give_back.lua"]:
        for name in sorted(set(re.findall(r"(?<!\w)(_[a-z]\w*)", path.read_text()))):
            if name in privates and name not in recorded and name not in OWN_PRIVATES:
                unrecorded.append(f"{path.relative_to(ROOT)}: {name} ({', '.join(privates[name])})")
    assert not unrecorded, "RQ privates named in worker/ but not recorded: " + "; ".join(unrecorded)


def test_own_privates_shadow_nothing_of_rqs() -> None:
    """The few names WorkTrain's classes share with some RQ private are not the base's."""
    base = instances()["BaseWorker"]
    for name in OWN_PRIVATES:
        assert not hasattr(BaseWorker, name) and name not in vars(base), name


def docs_table() -> tuple[str, list[str]]:
    text = (ROOT / "docs/DEVELOPING.md").read_text()
    heading = re.search(r"^### What WorkTrain uses of RQ beyond its documented API.*$", text, re.M)
    assert heading, "docs/DEVELOPING.md has no section on what WorkTrain uses of RQ"
    section = text[heading.end() :].split("\n#", 1)[0]
    return heading.group(0), re.findall(r"^\| `([^`]+)` \|", section, re.M)


def test_the_docs_table_lists_exactly_the_recorded_names() -> None:
    heading, rows = docs_table()
    assert RQ_CHECKED in heading
    recorded = [seam.name for seam in SEAMS]
    assert len(rows) == len(set(rows)), "a name twice in the docs table"
    assert set(rows) == set(recorded), {
        "in the docs only": sorted(set(rows) - set(recorded)),
        "recorded only": sorted(set(recorded) - set(rows)),
    }


def test_the_records_are_of_the_installed_rq_and_the_pin_allows_only_its_minor() -> None:
    assert version("rq") == RQ_CHECKED, (
        f"rq {version('rq')} is installed; the records were read from rq {RQ_CHECKED}: re-check each "
        "(docs/DEVELOPING.md), then update RQ_CHECKED, the docs table and pyproject.toml's pin"
    )
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    [pin] = [Requirement(line) for line in project["dependencies"] if Requirement(line).name == "rq"]
    major, minor, _ = (int(part) for part in RQ_CHECKED.split("."))
    assert pin.specifier.contains(RQ_CHECKED)
    assert not pin.specifier.contains(f"{major}.{minor + 1}.0"), f"{pin} allows an RQ not checked"
    assert not pin.specifier.contains(f"{major - 1}.99.0"), f"{pin} allows an RQ not checked"


def test_rqs_redis_layout_is_what_give_back_and_the_reaper_read() -> None:
    """give_back.lua's header and worker/queueing.py: the queue's list, its intermediate list
    (where RQ's BLMOVE moves a dequeued job), the job's hash and its `queued` status."""
    queue = instances()["Queue"]
    assert queue.key == "rq:queue:worktrain" == queue_key()
    assert queue.intermediate_queue_key == "rq:queue:worktrain:intermediate"
    assert IntermediateQueue(queue.key, queue.connection).key == queue.intermediate_queue_key
    assert Job.key_for("sess_1") == "rq:job:sess_1"
    assert JobStatus.QUEUED.value == "queued"
    lua = (ROOT / "daemon/bus/lua/give_back.lua").read_text()
    assert "`rq:queue:<name>:intermediate`" in lua and "`rq:job:<id>`" in lua and "'queued'" in lua
    assert instances()["BaseWorker"].dequeue_timeout == RQ_DEFAULT_BLOCK_SECONDS  # worker/dequeue.py's bound
