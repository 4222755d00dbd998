"""The restart policy of `worktrain up` (cli/restartpolicy.py): backoff, reset, give-up; no process."""

from __future__ import annotations

import pytest

from cli.restartpolicy import CrashHistory, GiveUp, Restart, RestartPolicy

pytestmark = pytest.mark.unit


def crash_loop(history: CrashHistory, uptime: float, count: int, start: float = 0.0) -> list[object]:
    """`count` deaths of a child that lives `uptime` seconds and restarts after each delay."""
    decisions: list[object] = []
    now = start
    for _ in range(count):
        started, died = now, now + uptime
        decision = history.record(started=started, died=died)
        decisions.append(decision)
        if isinstance(decision, GiveUp):
            break
        now = died + decision.delay
    return decisions


def test_the_backoff_doubles_from_half_a_second_up_to_thirty():
    policy = RestartPolicy()
    assert [policy.delay(n) for n in range(1, 10)] == [0.5, 1, 2, 4, 8, 16, 30, 30, 30]


def test_a_child_crashing_at_start_every_time_is_given_up_on_at_its_fifth_crash():
    decisions = crash_loop(CrashHistory(), uptime=0.1, count=10)
    assert decisions == [Restart(0.5, 1), Restart(1, 2), Restart(2, 3), Restart(4, 4), GiveUp(5, 60.0)]


def test_crashes_spread_beyond_the_window_never_give_up():
    history = CrashHistory()
    # Up 20 s each time (not stable): the backoff grows to its cap, but the crashes stay
    # under 5 a minute, so the child is restarted for as long as it keeps doing that.
    decisions = crash_loop(history, uptime=20.0, count=12)
    assert all(isinstance(d, Restart) for d in decisions), decisions
    assert [d.delay for d in decisions if isinstance(d, Restart)][-3:] == [30, 30, 30]
    assert max(d.crashes for d in decisions if isinstance(d, Restart)) <= 3


def test_a_child_that_stayed_up_long_enough_starts_the_backoff_over():
    history = CrashHistory()
    assert crash_loop(history, uptime=1.0, count=3) == [Restart(0.5, 1), Restart(1, 2), Restart(2, 3)]
    # Then it ran 31 s (stable): the next crash restarts after 0.5 s again, and the crashes
    # of the first burst have left the 60 s window.
    assert history.record(started=100.0, died=131.0) == Restart(0.5, 1)
    assert history.record(started=131.5, died=132.0) == Restart(1, 2)


def test_the_window_counts_only_recent_crashes():
    history = CrashHistory(RestartPolicy(max_crashes=3, window_seconds=10.0, stable_seconds=1000))
    assert history.record(started=0, died=1) == Restart(0.5, 1)
    assert history.record(started=2, died=3) == Restart(1, 2)
    assert history.record(started=11, died=11.5) == Restart(2, 2)  # the crash at t=1 left the window
    assert history.record(started=12, died=12.5) == GiveUp(3, 10.0)  # t=3, 11.5 and 12.5


@pytest.mark.parametrize("max_crashes", [1, 2])
def test_a_strict_policy_gives_up_early(max_crashes):
    decisions = crash_loop(CrashHistory(RestartPolicy(max_crashes=max_crashes)), uptime=0.1, count=5)
    assert len(decisions) == max_crashes and isinstance(decisions[-1], GiveUp)
