"""The steer bus against real Redis and fakeredis: README's HTTP API rules, README's HTTP API drain,
docs/durability.md hand-off."""

from __future__ import annotations

import threading

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from daemon.bus.session.fencing import Fenced
from daemon.bus.session.registry import NewSession, SessionRegistry
from daemon.bus.session.steerbus import Cancelled, ClaimRefused, SteerBus, SteerOutcome
from daemon.schema.records import SessionStatus, fold_journal
from tests.roundtrips import RoundTrips, counting_client

pytestmark = pytest.mark.unit


def new_session(registry: SessionRegistry) -> str:
    return registry.create(NewSession(workflowId="wf", goal="g", workspacePath="/tmp", stepCount=2))


def test_accept_assigns_contiguous_offsets_and_turn_zero_when_queued(bus, registry):
    sid = new_session(registry)
    refs = [bus.accept(sid, f"steer {i}").ref for i in range(3)]
    assert [r.offset for r in refs] == [1, 2, 3]
    assert {r.turnId for r in refs} == {0}
    assert [s.text for s in bus.pending(sid)] == ["steer 0", "steer 1", "steer 2"]


def test_unknown_session_is_not_found(bus):
    assert bus.accept("sess_01JD0000000000000000000000", "x").outcome is SteerOutcome.NOT_FOUND


def test_expected_turn_on_queued_session_is_no_live_turn(bus, registry):
    sid = new_session(registry)
    assert bus.accept(sid, "x", expected_turn_id=1).outcome is SteerOutcome.NO_LIVE_TURN
    assert bus.pending(sid) == []


def test_expected_turn_matches_live_turn_or_is_stale(bus, registry):
    sid = new_session(registry)
    channel = bus.channel(sid, "w1", 30)
    channel.claim()
    turn = channel.start_turn().turn
    first = bus.accept(sid, "a", expected_turn_id=turn)
    second = bus.accept(sid, "b", expected_turn_id=turn)
    assert (first.outcome, second.outcome) == (SteerOutcome.ACCEPTED, SteerOutcome.ACCEPTED)
    assert (first.ref.turnId, second.ref.offset) == (turn, 2)
    stale = bus.accept(sid, "c", expected_turn_id=turn + 5)
    assert stale.outcome is SteerOutcome.STALE_TURN and stale.current_turn_id == turn
    channel.turn_ended()
    assert bus.accept(sid, "d", expected_turn_id=turn).outcome is SteerOutcome.NO_LIVE_TURN


def test_client_msg_id_duplicate_and_reuse(bus, registry):
    sid = new_session(registry)
    first = bus.accept(sid, "hello", client_msg_id="m-1")
    again = bus.accept(sid, "hello", client_msg_id="m-1")
    other = bus.accept(sid, "other", client_msg_id="m-1")
    assert first.outcome is SteerOutcome.ACCEPTED
    assert again.outcome is SteerOutcome.DUPLICATE and again.ref == first.ref
    assert other.outcome is SteerOutcome.CLIENT_MSG_ID_REUSE
    assert len(bus.pending(sid)) == 1


def test_rule_order_not_found_before_dedup_before_turn_check(bus, registry):
    sid = new_session(registry)
    bus.accept(sid, "hello", client_msg_id="m")
    # Rule 2 before rule 3: a duplicate is answered even with a stale expectedTurnId.
    assert bus.accept(sid, "hello", expected_turn_id=9, client_msg_id="m").outcome is SteerOutcome.DUPLICATE
    assert (
        bus.accept(sid, "changed", expected_turn_id=9, client_msg_id="m").outcome
        is SteerOutcome.CLIENT_MSG_ID_REUSE
    )
    channel = bus.channel(sid, "w1", 30)
    channel.claim()
    channel.finish(SessionStatus.COMPLETED, "workflow_complete")
    # Rule 1 first: a finished session is not found, even for a known clientMsgId.
    assert bus.accept(sid, "hello", client_msg_id="m").outcome is SteerOutcome.NOT_FOUND


def test_sixteen_threads_get_contiguous_offsets(bus, registry):
    sid = new_session(registry)
    offsets: list[int] = []
    lock = threading.Lock()

    def steer(worker: int) -> None:
        for i in range(25):
            result = bus.accept(sid, f"t{worker}-{i}")
            with lock:
                offsets.append(result.ref.offset)

    threads = [threading.Thread(target=steer, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(offsets) == list(range(1, 401))
    assert [s.offset for s in bus.pending(sid)] == list(range(1, 401))


def test_racing_client_msg_id_with_different_texts_accepts_exactly_one(bus, registry):
    sid = new_session(registry)
    barrier = threading.Barrier(8)
    outcomes: list[SteerOutcome] = []

    def steer(n: int) -> None:
        barrier.wait()
        outcomes.append(bus.accept(sid, f"text {n}", client_msg_id="same").outcome)

    threads = [threading.Thread(target=steer, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcomes.count(SteerOutcome.ACCEPTED) == 1
    assert outcomes.count(SteerOutcome.CLIENT_MSG_ID_REUSE) == 7


def test_claim_drains_steers_sent_before_the_first_turn(bus, registry):
    sid = new_session(registry)
    bus.accept(sid, "early 1")
    bus.accept(sid, "early 2")
    claim = bus.channel(sid, "w1", 30).claim()
    assert [s.text for s in claim.inflight] == ["early 1", "early 2"]
    assert claim.attempt == 1 and claim.history_length == 0 and not claim.resumed


def test_turn_end_drains_all_pending_and_checkpoint_retires_them(bus, registry):
    sid = new_session(registry)
    channel = bus.channel(sid, "w1", 30)
    channel.claim()
    channel.checkpoint(0, ['{"role":"user"}'], [], 1)
    turn = channel.start_turn().turn
    for text in ("a", "b", "c"):
        bus.accept(sid, text)
    drained = channel.turn_ended()
    assert [s.offset for s in drained] == [1, 2, 3]
    assert registry.get(sid).pendingSteers == 3  # in flight still counts until checkpointed
    # a steer accepted after the drain waits for the next turn end
    bus.accept(sid, "d")
    channel.checkpoint(1, ['{"role":"assistant"}', '{"role":"user"}'], [1, 2, 3], turn + 1)
    assert channel.history() == ['{"role":"user"}', '{"role":"assistant"}', '{"role":"user"}']
    assert [s.text for s in bus.pending(sid)] == ["d"]
    # journalled delivered when the request of the turn that carries them leaves (docs/durability.md
    # v3), not when that turn is bound
    assert {v.state for v in fold_journal(bus.journal(sid))} == {"pending"}
    started = channel.start_turn(turn + 1)
    assert (started.receipted, started.unsent) == ([], [1, 2, 3])
    assert {v.state for v in fold_journal(bus.journal(sid))} == {"pending"}
    assert channel.request_sent(turn + 1) == [1, 2, 3]
    assert channel.request_sent(turn + 1) == [1, 2, 3]  # safe to repeat: journalled once
    assert channel.start_turn(turn + 1).receipted == [1, 2, 3]  # bound again: the same receipt
    views = fold_journal(bus.journal(sid))
    assert [(v.offset, v.state, v.deliveredTurnId) for v in views] == [
        (1, "delivered", turn + 1),
        (2, "delivered", turn + 1),
        (3, "delivered", turn + 1),
        (4, "pending", None),
    ]


def test_drained_but_not_checkpointed_steers_come_back_on_resume(bus, registry):
    sid = new_session(registry)
    first = bus.channel(sid, "w1", 30)
    first.claim()
    first.checkpoint(0, ['{"m":1}'], [], 1)
    first.start_turn()
    bus.accept(sid, "drained")
    assert [s.text for s in first.turn_ended()] == ["drained"]
    bus.accept(sid, "later")
    # w1 dies before its checkpoint: its lease lapses and w2 resumes
    bus.client.delete(bus.keys.session(sid).lease)
    claim = bus.channel(sid, "w2", 30).claim()
    assert claim.resumed and claim.history_length == 1
    assert [s.text for s in claim.inflight] == ["drained", "later"]
    with pytest.raises(Fenced) as fenced:
        first.start_turn()
    assert fenced.value.reason == "stale_attempt"


def test_second_worker_is_refused_while_lease_is_held(bus, registry):
    sid = new_session(registry)
    bus.channel(sid, "w1", 30).claim()
    with pytest.raises(ClaimRefused) as refused:
        bus.channel(sid, "w2", 30).claim()
    assert refused.value.reason == "leased" and refused.value.holder == "w1"


def test_finish_records_leftover_steers_as_undelivered(bus, registry):
    sid = new_session(registry)
    channel = bus.channel(sid, "w1", 30)
    channel.claim()
    bus.accept(sid, "never read")
    assert channel.finish(SessionStatus.FAILED, "incomplete") == [1]
    record = registry.get(sid)
    assert record.status is SessionStatus.FAILED and record.outcome == "incomplete"
    assert [v.state for v in fold_journal(bus.journal(sid))] == ["undelivered"]
    assert bus.client.ttl(bus.keys.session(sid).record) > 0


def test_cancel_queued_session_ends_it_and_running_one_at_turn_boundary(bus, registry):
    queued = new_session(registry)
    assert bus.cancel(queued)[0] == "cancelled"
    assert registry.get(queued).status is SessionStatus.CANCELLED
    running = new_session(registry)
    channel = bus.channel(running, "w1", 30)
    channel.claim()
    assert bus.cancel(running)[0] == "requested"
    with pytest.raises(Cancelled):
        channel.start_turn()
    assert bus.cancel("sess_01JD0000000000000000000000")[0] == "not_found"


def test_the_idle_take_wakes_on_a_new_steer_and_takes_them_all(bus, registry):
    sid = new_session(registry)
    channel = bus.channel(sid, "w1", 30)
    channel.claim()
    channel.start_turn(1)
    channel.turn_ended(SessionStatus.WAITING)
    taken = channel.take()
    assert (taken.steers, taken.cancel_requested) == ([], False)
    assert channel.wait_for_steers(taken.cursor, 0.05) is False
    bus.accept(sid, "wake up")
    bus.accept(sid, "and this")
    assert channel.wait_for_steers(taken.cursor, 1) is True
    again = channel.take()
    assert [s.text for s in again.steers] == ["wake up", "and this"]
    assert registry.get(sid).status is SessionStatus.RUNNING
    assert channel.wait_for_steers(again.cursor, 0.05) is False  # nothing newer than the take


def test_scripts_reload_after_script_flush(bus, registry):
    sid = new_session(registry)
    bus.accept(sid, "one")
    bus.client.script_flush()
    assert bus.accept(sid, "two").ref.offset == 2


def test_accept_is_one_round_trip(redis_server, keys):
    client = counting_client(redis_server.url)
    client.flushdb()
    bus = SteerBus(client, keys)
    sid = new_session(SessionRegistry(client, keys))
    bus.accept(sid, "warm the script cache")
    channel = bus.channel(sid, "w1", 30)
    channel.claim()
    channel.heartbeat()  # the first call of each script in a process also loads it (NOSCRIPT)
    channel.checkpoint(0, ["{}"], [1], 1)
    channel.turn_ended()
    with RoundTrips() as accept_trips:
        bus.accept(sid, "measured", expected_turn_id=None, client_msg_id="c1")
    with RoundTrips() as turn_end_empty:
        channel.turn_ended()
    channel.checkpoint(0, ["{}"], [2], 1)
    for i in range(5):
        bus.accept(sid, f"k{i}")
    with RoundTrips() as turn_end_k:
        drained = channel.turn_ended()
    with RoundTrips() as heartbeat:
        channel.heartbeat()
    assert len(drained) == 5
    assert (accept_trips.count, turn_end_empty.count, turn_end_k.count, heartbeat.count) == (1, 1, 1, 1)


def test_session_keys_share_one_hash_tag(keys):
    sid = "sess_01JD0000000000000000000000"
    tags = {key[key.index("{") : key.index("}") + 1] for key in keys.session(sid).all()}
    assert tags == {"{" + sid + "}"}
    with pytest.raises(ValueError):
        keys.session("sess_../../etc")


@pytest.mark.redis
def test_redis_error_surfaces_as_redis_error(keys):
    # no retries: redis-py's default (10, backoff with jitter) spent 4 s on a closed port
    client = redis.Redis(port=1, socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0))
    with pytest.raises(redis.ConnectionError):
        SteerBus(client, keys).accept("sess_01JD0000000000000000000000", "x")


def test_accept_reports_the_timestamp_it_gave_steer_accepted(bus, registry):
    sid = new_session(registry)
    result = bus.accept(sid, "x", client_msg_id="m")
    ((_, fields),) = bus.client.xrange(bus.keys.session(sid).events)
    assert result.accepted_at is not None and f'"ts":"{result.accepted_at}"' in fields["data"]
    assert bus.accept(sid, "x", client_msg_id="m").accepted_at is None  # a duplicate accepts nothing


def test_receipt_of_a_checkpoint_outlives_the_worker_that_wrote_it(bus, registry):
    sid = new_session(registry)
    first = bus.channel(sid, "w1", 30)
    first.claim()
    first.checkpoint(0, ['{"m":1}'], [], 1)
    assert first.start_turn(1).receipted == []
    bus.accept(sid, "steer")
    [steer] = first.turn_ended()
    first.checkpoint(1, ['{"m":2}', '{"m":3}'], [steer.offset], 2)
    # w1 binds turn 2 and dies before its request leaves: turn 2 is not named
    assert first.start_turn(2).unsent == [1]
    bus.client.delete(bus.keys.session(sid).lease)
    second = bus.channel(sid, "w2", 30)
    assert second.claim().receipt is None
    started = second.start_turn(2, drain=True)  # a new attempt's first turn is a new turn
    assert (started.turn, started.receipted, started.unsent, started.steers) == (3, [], [1], [])
    assert second.request_sent(3) == [1]  # the turn whose request carried it
    assert [v.deliveredTurnId for v in fold_journal(bus.journal(sid))] == [3]
    # w2 dies right after the send, before turn_ended: the next attempt hands the receipt on
    bus.client.delete(bus.keys.session(sid).lease)
    receipt = bus.channel(sid, "w3", 30).claim().receipt
    assert receipt is not None and (receipt.turn, receipt.offsets) == (3, [1])


def test_an_opening_checkpoint_for_the_live_turn_keeps_no_receipt(bus, registry):
    sid = new_session(registry)
    bus.accept(sid, "early")
    channel = bus.channel(sid, "w1", 30)
    channel.claim()
    started = channel.start_turn(1, drain=True)
    channel.checkpoint(0, ['{"m":1}'], [s.offset for s in started.steers], started.turn)
    channel.turn_ended()
    assert channel.start_turn(2).receipted == []  # the worker receipted it at turn 1 itself


def test_heartbeat_reports_the_lease_and_a_cancel_in_one_answer(bus, registry):
    sid = new_session(registry)
    channel = bus.channel(sid, "w1", 30)
    channel.claim()
    assert (channel.heartbeat().cancel_requested, channel.heartbeat().steers) == (False, 0)
    bus.cancel(sid)
    assert channel.heartbeat().cancel_requested
    bus.accept(sid, "one")
    assert channel.heartbeat().steers == 1
    bus.client.set(bus.keys.session(sid).lease, "w2")
    with pytest.raises(Fenced) as fenced:
        channel.heartbeat()
    assert fenced.value.reason == "lease_lost"
