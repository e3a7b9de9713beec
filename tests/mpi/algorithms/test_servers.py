"""easgd, asgd and masgd under mpirun: rank 0 serves, the others work. Every
run is checked against a serial replay of docs/algorithms.md in the exact order
the server logged (the log is broadcast as int arrays), with uneven workers:
one that syncs many times, one that never syncs, one that syncs once, one
that only pushes its last block from stop()."""
import time

import numpy as np
import pytest
from mpi4py import MPI

import psgd
import reference
from psgd import protocol, settings
from psgd.buffers import host_copy
from psgd.errors import ProtocolError
from server_plans import SHAPES, SIZE, check_replay, drive, initial, local, plan, share_log, x0

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(60)]


# the three algorithms against their replays -------------------------------------
@pytest.mark.parametrize("alpha", [None, 0.5, 1.0])
def test_easgd_matches_replay(comm, alpha):
    used = 0.9 / (comm.size - 1) if alpha is None else alpha
    options = {} if alpha is None else {"alpha": alpha}
    obj, log, _ = check_replay(
        comm, "easgd", lambda x, log, f: reference.easgd(x, log, f, used), **options)
    assert obj.alpha == pytest.approx(used)
    # That a worker gets x from before the update is what the replay checks:
    # its models match only that reading (see test_replay_tells_the_readings_apart).


@pytest.mark.parametrize("alpha", [None, 0.7])
def test_asgd_matches_replay(comm, alpha):
    used = 1.0 if alpha is None else alpha
    options = {} if alpha is None else {"alpha": alpha}
    _, log, _ = check_replay(
        comm, "asgd", lambda x, log, f: reference.asgd(x, log, f, used), **options)
    assert (log[:, 3] == log[:, 2] + 1).all()   # no barrier: answered at once


@pytest.mark.parametrize("scope", ["worker", "global"])
@pytest.mark.parametrize("momentum,alpha", [(None, None), (0.5, 0.8)])
def test_masgd_matches_replay(comm, scope, momentum, alpha):
    m = 0.9 if momentum is None else momentum
    a = 1 - m if alpha is None else alpha
    options = {k: v for k, v in (("momentum", momentum), ("alpha", alpha)) if v is not None}
    obj, _, _ = check_replay(
        comm, "masgd", lambda x, log, f: reference.asgd(x, log, f, a, m, scope),
        scope=scope, **options)
    assert (obj.momentum, obj.alpha) == (pytest.approx(m), pytest.approx(a))
    if obj.role == "server":
        assert len(obj.velocities) == (comm.size - 1 if scope == "worker" else 1)


@pytest.mark.parametrize("momentum,alpha,period", [(None, None, None), (0.5, 0.8, 2), (0.9, 1.5, 5)])
def test_masgd_delayed_nesterov_matches_replay(comm, momentum, alpha, period):
    """Every delta at once, one Nesterov step on the period's mean delta
    every D-th update (docs/algorithms.md); D and alpha by N when not given."""
    N = comm.size - 1
    m = 0.9 if momentum is None else momentum
    D = N if period is None else period
    a = D * (1 - m) if alpha is None else alpha
    options = {k: v for k, v in (("momentum", momentum), ("alpha", alpha),
                                 ("delay_period", period)) if v is not None}
    obj, _, _ = check_replay(
        comm, "masgd", lambda x, log, f: reference.asgd(x, log, f, a, m, delay=D),
        delayed=True, **options)
    assert (obj.momentum, obj.alpha, obj.delay_period) == (pytest.approx(m), pytest.approx(a), D)


@pytest.mark.parametrize("name,replay", [
    ("easgd", lambda x, log, f: reference.easgd(x, log, f, 0.5)),
    ("masgd", lambda x, log, f: reference.asgd(x, log, f, 1 - 0.9, 0.9, "worker"))])
def test_chunked_messages_match_the_replay(comm, name, replay):
    """Buffers above the MPI count limit go in chunks (here 4 elements)."""
    old = settings.set("PSGD_MPI_CHUNK", 4)
    try:
        options = {"alpha": 0.5} if name == "easgd" else {}
        check_replay(comm, name, replay, **options)
    finally:
        settings.set("PSGD_MPI_CHUNK", old)


def test_replay_tells_the_readings_apart(comm):
    """The replay checks can fail: psgd's own models (run with alpha 0.5)
    match the replay with 0.5 and not the one with 0.4, nor a replay where the
    worker gets the center from after the server's update."""
    obj, result, log, _ = drive(comm, "easgd", alpha=0.5)

    def after_update(x0_, log_, local_, alpha):
        x, w, after = x0_.copy(), {}, {}
        for row in log_:
            k = int(row[0])
            w_k = w.get(k, x0_) + local_(k, len(after.get(k, ())))
            x = x + alpha * (w_k - x)
            w[k] = w_k - alpha * (w_k - x)
            after.setdefault(k, []).append(w[k].copy())
        return x, after

    def mine_in(replay):
        """(psgd's models, the replay's) on this rank: the center, or the
        worker's model after each of its syncs."""
        center, after = replay
        if obj.role == "server":
            return [obj.buffer.data], [center]
        seen = result[0]                  # (the replay also holds the push from stop())
        return seen, after.get(comm.rank, [])[:len(seen)]

    def matches(replay):
        ours, theirs = mine_in(replay)
        return len(ours) == len(theirs) and all(np.allclose(a, b) for a, b in zip(ours, theirs))

    if not mine_in(reference.easgd(x0(), log, local, 0.5))[0]:
        return                       # a worker that never synced has nothing to tell
    assert matches(reference.easgd(x0(), log, local, 0.5))
    assert not matches(reference.easgd(x0(), log, local, 0.4))
    if obj.role == "worker":
        assert not matches(after_update(x0(), log, local, 0.5))


def test_initial_model_of_rank_0_reaches_workers(comm):
    obj = psgd.create("asgd", [np.full(3, comm.rank + 1.0)], comm=comm)
    np.testing.assert_array_equal(obj.params[0], 1.0)
    if obj.role == "server":
        obj.run()
    else:
        np.testing.assert_array_equal(obj.previous.data, 1.0)
        obj.stop()


# barrier_period -------------------------------------------------------------------
def jittery_worker(obj, k, syncs=6):
    """Worker k syncs a few times with a little 'compute' between, so arrivals mix."""
    rng = np.random.default_rng(k)
    flat, seen = obj.buffer.data, []
    for t in range(syncs + k % 3):
        time.sleep(rng.uniform(0, 2e-3))
        flat += obj.buffer.xp.asarray(local(k, t))
        obj.synchronize(1 + t % 4)
        seen.append(host_copy(flat))
    obj.stop(0)
    return seen, host_copy(flat)


@pytest.mark.parametrize("name,options", [
    ("asgd", {}), ("masgd", {"scope": "worker"}), ("masgd", {"scope": "global"})])
@pytest.mark.parametrize("period", [1, 3])
def test_barrier_bounds_staleness(comm, name, options, period):
    check_barrier(comm, name, options, period)


def check_barrier(comm, name, options, period, xp=np):
    obj, result, log, finished = drive(comm, name, jittery_worker, xp=xp,
                                       barrier_period=period, **options)
    N = comm.size - 1
    # replies follow the barrier rule, recomputed from the service order alone
    expected = reference.barrier_replies(log, finished, period, range(1, comm.size))
    assert log[:, 3].tolist() == expected
    # staleness: updates between the x a worker started from and its own update
    base = {}
    for rank, _, order, reply, _, staleness in log:
        assert staleness == order - base.get(rank, 0) <= period + N - 2   # as the server logged
        base[rank] = reply
    if comm.rank == 0:
        assert sum(obj.stats.staleness) == len(log)
        assert obj.stats.staleness_max == log[:, 5].max(initial=0)
    # and the models still match the replay
    m = 0.9 if name == "masgd" else None
    alpha = 1.0 if m is None else 1 - m
    center, after = reference.asgd(x0(), log, local, alpha, m, options.get("scope", "worker"))
    if comm.rank == 0:
        np.testing.assert_allclose(host_copy(obj.buffer.data), center, rtol=1e-12, atol=1e-12)
    else:
        seen, final = result
        for t, w in enumerate(seen):
            np.testing.assert_allclose(w, after[comm.rank][t], rtol=1e-12, atol=1e-12)


def test_barrier_period_zero_or_negative_disables_it(comm):
    _, _, log, _ = drive(comm, "asgd", jittery_worker, barrier_period=-2)
    assert (log[:, 3] == log[:, 2] + 1).all()


# fairness and idling ----------------------------------------------------------------
def test_a_tight_loop_does_not_starve_the_others(comm):
    hog, hog_syncs, slow_syncs = 1, 600, 4

    def worker(obj, k):
        if k == hog:
            for _ in range(hog_syncs):
                obj.synchronize(1)
        else:
            for _ in range(slow_syncs):
                time.sleep(1e-3)
                obj.synchronize(1)
        obj.stop(0)

    _, _, log, _ = drive(comm, "asgd", worker)
    # once a control message is seen, every other worker is served at most once before it
    for rank, _, order, _, arrived, _ in log:
        between = log[arrived:order, 0].tolist()
        assert rank not in between and len(between) == len(set(between)), (rank, between)
    # end to end: the others are done while the hog is still syncing
    last = {int(r): int(o) for r, _, o, *_ in log}
    for rank in range(2, comm.size):
        assert last[rank] < last[hog], (rank, last)


def test_waiting_workers_are_served_in_arrival_order_under_contention(comm):
    """Every worker syncs in a tight loop on a larger model, so the queue is
    full: a worker that is waiting must be served before anyone is served twice."""
    syncs = 25

    def worker(obj, k):
        for t in range(syncs):
            obj.synchronize(1)
        obj.stop(0)

    obj = psgd.create("asgd", [np.zeros(100_000)], comm=comm)
    obj.run() if obj.role == "server" else worker(obj, comm.rank)
    log, _ = share_log(comm, obj)
    assert len(log) == syncs * (comm.size - 1)
    waits = log[:, 2] - log[:, 4]
    for (rank, _, order, _, arrived, _) in log:
        between = log[arrived:order, 0].tolist()
        assert rank not in between and len(between) == len(set(between)), (rank, between)
    assert waits.max() <= comm.size - 2
    if comm.size > 3:                   # with two workers, a fair server just alternates
        assert waits.max() >= 1         # there was contention to be fair about


def test_idle_server_sleeps_instead_of_spinning(comm):
    def worker(obj, k):
        time.sleep(0.4)             # 'compute'
        obj.synchronize(10)
        obj.stop(0)

    obj, stats, _, _ = drive(comm, "easgd", worker, poll_max_sleep=2e-3)
    if comm.rank == 0:
        assert stats.syncs == comm.size - 1 and stats.samples == 10 * (comm.size - 1)
        assert stats.idle_s >= 0.3 and stats.sleeps > 0
        assert stats.cpu_s < 0.5 * stats.wall_s, stats
        assert (obj.busy_s, obj.idle_s) == (stats.busy_s, stats.idle_s)
        assert stats.as_dict()["per_worker"] == {k: [1, 10] for k in range(1, comm.size)}


# checkpoint state ---------------------------------------------------------------------
@pytest.mark.parametrize("name,options", [("easgd", {}), ("asgd", {}),
                                          ("masgd", {"scope": "worker"}),
                                          ("masgd", {"scope": "global"}),
                                          ("masgd", {"delayed": True, "delay_period": 3})])
def test_state_dict_round_trip(comm, name, options):
    obj, _, _, _ = drive(comm, name, **options)
    state = obj.state_dict()
    if obj.role == "server":
        delayed = options.get("delayed", False)
        expected = {"center"} | ({"velocity"} if name == "masgd" else set()) | \
            ({"period_sum", "in_period"} if delayed else set())
        np.testing.assert_array_equal(state["center"], obj.buffer.data)
        if name == "masgd":
            rows = comm.size - 1 if options.get("scope") == "worker" else 1
            assert state["velocity"].shape == (rows, SIZE)
        if delayed:     # a period left open: what it holds must survive the round trip
            assert state["in_period"][0] == obj.syncs % 3
    else:
        expected = {"w_prev"} if name != "easgd" else set()
    assert set(state) == expected
    fresh = psgd.create(name, [np.zeros(s) for s in SHAPES], comm=comm, **options)
    fresh.load_state_dict(state)
    for key, value in fresh.state_dict().items():
        np.testing.assert_array_equal(value, state[key])
    fresh.run() if fresh.role == "server" else fresh.stop(0)


# bad input -------------------------------------------------------------------------------
@pytest.mark.parametrize("name,options,match", [
    ("masgd", {"delay_period": 3}, "nothing without delayed"),
    ("easgd", {"alpha": 0.0}, "0 < alpha <= 1"),
    ("easgd", {"alpha": 1.5}, "0 < alpha <= 1"),
    ("asgd", {"alpha": -1.0}, "must be > 0"),
    ("asgd", {"barrier_period": 1.5}, "integer"),
    ("masgd", {"momentum": 1.0}, "0 <= momentum < 1"),
    ("masgd", {"scope": "node"}, "worker, global"),
    ("masgd", {"alpha": 0.0}, "must be > 0"),
    ("easgd", {"poll_max_sleep": -1.0}, "poll_max_sleep"),
    ("asgd", {"sync_period": 3}, "no option sync_period"),
])
def test_invalid_options_raise_on_every_rank(comm, name, options, match):
    with pytest.raises(psgd.UsageError, match=match):
        psgd.create(name, [np.zeros(3)], comm=comm, **options)
    assert comm.allreduce(1) == comm.size      # nobody is left waiting


def test_worker_misuse_is_a_usage_error_and_the_job_goes_on(comm):
    obj = psgd.create("asgd", [np.zeros(3)], comm=comm)
    if obj.role == "server":
        with pytest.raises(psgd.UsageError, match="call run"):
            obj.synchronize(1)
        obj.run()
        with pytest.raises(psgd.UsageError, match="already"):
            obj.run()
        return
    with pytest.raises(psgd.UsageError, match="non-negative integer"):
        obj.synchronize(-1)
    obj.synchronize(2)
    obj.stop(0)
    obj.stop(0)                                  # a second stop does nothing
    with pytest.raises(psgd.UsageError, match="after stop"):
        obj.synchronize(1)


@pytest.mark.parametrize("name,options", [("easgd", {}), ("easgd", {"overlap": "always"}),
                                          ("asgd", {"barrier_period": 1})])
@pytest.mark.parametrize("message,match", [
    ([7, 0], "unknown control message 7 from rank {bad}"),
    ([0, 1, 2], "malformed control message from rank {bad}"),
])
def test_a_bad_control_message_fails_every_rank_without_a_hang(comm, name, options,
                                                               message, match):
    """The server names the sender and value, tells every worker (held ones
    too), and all raise."""
    bad = comm.size - 1
    match = match.format(bad=bad)
    obj = psgd.create(name, [np.zeros(4)], comm=comm, **options)
    if obj.role == "server":
        with pytest.raises(ProtocolError, match=match):
            obj.run()
    elif comm.rank == bad:
        obj.comm.Send([np.array(message, dtype=np.int64), MPI.INT64_T], dest=0,
                      tag=protocol.TAG_MSG)
        with pytest.raises(ProtocolError, match=match):
            obj.stop(0)
    else:
        with pytest.raises(ProtocolError, match=match):
            for _ in range(20000):
                obj.synchronize(1)
                time.sleep(1e-4)
    with pytest.raises(ProtocolError):          # and it stays failed
        obj.run() if obj.role == "server" else obj.synchronize(1)
    assert comm.allreduce(1) == comm.size


def test_a_failing_server_update_stops_every_worker(comm):
    obj = psgd.create("asgd", [np.zeros(4)], comm=comm)
    if obj.role == "server":
        def broken(rank, lo, hi):
            raise FloatingPointError("update blew up")
        obj.update = broken
        with pytest.raises(FloatingPointError, match="blew up"):
            obj.run()
        assert obj.failure == "asgd server: failed"
    else:
        with pytest.raises(ProtocolError, match="rank %d: the asgd server stopped: it failed"
                           % comm.rank):
            for _ in range(1000):
                obj.synchronize(1)
    assert comm.allreduce(1) == comm.size

