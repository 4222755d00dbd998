"""A coordinator that keeps steering, and the exactly-once check of what reached the agent.

The coordinator retries each message with the same clientMsgId (on no answer and on 503)
until it gets a 200 (`accepted`, or `duplicate` when an earlier try was accepted but its
answer was lost) or a 404 (the session ended: not accepted). Its ledger holds exactly the
steers a 200 was given for: those are the ones that must never be lost.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tests.crash.harness import Answer, Stack, user_texts

RETRY_SECONDS = 0.1


@dataclass
class Coordinator:
    stack: Stack
    should_steer: Callable[[str], bool] = lambda sid: True
    every: float = 0.25  # seconds between two steers to the same session
    accepted: dict[str, dict[int, str]] = field(default_factory=dict)  # sid -> offset -> text
    statuses: list[str] = field(default_factory=list)  # accepted / duplicate / not_found
    unavailable: list[Answer] = field(default_factory=list)  # 503s seen (kept for their headers)
    no_answer: int = 0
    sessions: list[str] = field(default_factory=list)
    stopped: threading.Event = field(default_factory=threading.Event)
    throttled: int = 0  # 429 too_many_pending_steers answers, each retried
    _sent: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _thread: threading.Thread | None = None

    def post(self, sid: str, text: str, client_msg_id: str) -> Answer:
        """One message, retried until it gets a definite answer."""
        while True:
            answer = self.stack.steer(sid, text, client_msg_id)
            if answer.status == 200:
                steer = answer.body["steer"]
                known = self.accepted.setdefault(sid, {}).setdefault(steer["offset"], text)
                assert known == text, (sid, steer, known, text)
                self.statuses.append(answer.body["status"])
                return answer
            if answer.status == 404:
                self.statuses.append("not_found")
                return answer
            if answer.status == 503:
                self.unavailable.append(answer)
            elif answer.status == 429:  # too many steers waiting (a worker is down): later, as told
                self.throttled += 1
            elif answer.status == 0:
                self.no_answer += 1
            else:
                raise AssertionError(f"unexpected steer answer {answer}")
            time.sleep(RETRY_SECONDS)

    def next_message(self, sid: str) -> tuple[str, str]:
        with self._lock:
            self._sent += 1
            n = self._sent
        return f"[steer {sid[-8:]} #{n:04d}]", f"coord-{n}"

    def steer_once(self, sid: str) -> Answer:
        text, client_msg_id = self.next_message(sid)
        return self.post(sid, text, client_msg_id)

    def run(self) -> None:
        while not self.stopped.is_set():
            started = time.monotonic()
            for sid in list(self.sessions):
                if self.stopped.is_set():
                    return
                if self.should_steer(sid):
                    self.steer_once(sid)
            self.stopped.wait(max(self.every - (time.monotonic() - started), 0.01))

    def start(self) -> Coordinator:
        self._thread = threading.Thread(target=self.run, name="coordinator", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopped.set()
        if self._thread is not None:
            self._thread.join(30)


@dataclass
class Verdict:
    lost: int = 0
    duplicated: int = 0
    undelivered: int = 0
    disordered: int = 0
    problems: list[str] = field(default_factory=list)

    def add(self, other: Verdict) -> None:
        self.lost += other.lost
        self.duplicated += other.duplicated
        self.undelivered += other.undelivered
        self.disordered += other.disordered
        self.problems.extend(other.problems)


def verify(stack: Stack, sid: str, accepted: dict[int, str]) -> Verdict:
    """Each accepted steer of a finished session is, exactly once: in the final model request
    and journalled `delivered`, or journalled `undelivered` and in no request; in offset order.

    The final model request carries the whole transcript the agent was ever given (the
    history only grows), so a steer in it once is delivered once.
    """
    verdict = Verdict()
    requests = stack.model.requests_of(sid)
    final = user_texts(requests[-1]) if requests else ""
    journal = stack.journal(sid)
    accepted_texts = {int(e["offset"]): e["text"] for e in journal if e["type"] == "accepted"}
    retired: dict[int, list[str]] = {}
    for entry in journal:
        if entry["type"] in ("delivered", "undelivered"):
            for offset in _offsets(entry["offsets"]):
                retired.setdefault(offset, []).append(entry["type"])
    positions = []
    for offset, text in sorted(accepted.items()):
        seen = final.count(text)
        states = retired.get(offset, [])
        where = f"{sid} offset {offset} {text!r}: in the final request {seen}x, journal {states}"
        if accepted_texts.get(offset) != text:
            verdict.lost += 1
            verdict.problems.append(f"{where}; not journalled as accepted")
        elif states == ["delivered"] and seen == 1:
            positions.append(final.index(text))
        elif states == ["undelivered"] and seen == 0:
            verdict.undelivered += 1
        elif seen > 1 or len(states) > 1 or (states == ["undelivered"] and seen):
            verdict.duplicated += 1
            verdict.problems.append(where)
        else:
            verdict.lost += 1
            verdict.problems.append(where)
    if positions != sorted(positions):
        verdict.disordered += 1
        verdict.problems.append(f"{sid}: steers out of offset order in the final request")
    return verdict


def _offsets(raw: str) -> list[int]:
    return [int(x) for x in raw.strip("[]").replace(" ", "").split(",") if x]
