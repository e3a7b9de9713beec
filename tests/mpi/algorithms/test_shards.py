"""Sharded parameter servers (servers = S): ranks 0..S-1 each serve one
contiguous shard of the flat buffer. Every shard's center, and every
worker's slice of it, equals the serial replay of docs/algorithms.md in that
shard's own service order; the model here (23 elements in tensors of 12, 0,
5 and 6) divides by neither 2 nor 3, so shards are uneven and cut tensors.
S runs up to size - 1 (what the size cannot hold is skipped)."""
import numpy as np
import pytest
from mpi4py import MPI

import psgd
import reference
from psgd import protocol, settings
from psgd.buffers import host_copy, shard_bounds
from psgd.errors import ProtocolError
from server_plans import SHAPES, SIZE
from shard_plans import check_sharded_replay, drive_sharded, sharded_worker

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(60)]


def servers_or_skip(comm, S):
    S = comm.size - 1 if S == "max" else S
    if S >= comm.size:
        pytest.skip("%d servers need %d ranks" % (S, S + 1))
    return S


SERVERS = [1, 2, 3, "max"]


def test_shards_are_balanced_contiguous_and_cut_tensors():
    assert shard_bounds(23, 1) == [(0, 23)]
    assert shard_bounds(23, 2) == [(0, 11), (11, 23)]
    assert shard_bounds(23, 3) == [(0, 7), (7, 15), (15, 23)]   # cuts tensors 0 and 2
    assert shard_bounds(2, 3) == [(0, 0), (0, 1), (1, 2)]        # an empty shard is allowed


@pytest.mark.parametrize("S", SERVERS)
def test_easgd_shards_match_replay(comm, S):
    S = servers_or_skip(comm, S)
    alpha = 0.9 / (comm.size - S)          # N = P - S workers
    obj, _ = check_sharded_replay(comm, "easgd",
                                  lambda x, log, f: reference.easgd(x, log, f, alpha), S)
    assert obj.alpha == pytest.approx(alpha) and obj.N == comm.size - S


@pytest.mark.parametrize("S", SERVERS)
@pytest.mark.parametrize("name,scope", [("asgd", None), ("masgd", "worker"),
                                        ("masgd", "global")])
def test_asgd_and_masgd_shards_match_replay(comm, S, name, scope):
    S = servers_or_skip(comm, S)
    m, alpha = (None, 1.0) if name == "asgd" else (0.9, 0.1)
    options = {} if scope is None else {"scope": scope}
    obj, _ = check_sharded_replay(
        comm, name, lambda x, log, f: reference.asgd(x, log, f, alpha, m, scope or "worker"),
        S, **options)
    if obj.role == "server" and name == "masgd":
        lo, hi = obj.shard
        rows = comm.size - S if scope == "worker" else 1
        assert [v.data.shape for v in obj.velocities] == [(hi - lo,)] * rows


@pytest.mark.parametrize("S", [2, 3])
@pytest.mark.parametrize("compensation", ["scale", "dc"])
def test_staleness_compensation_per_shard(comm, S, compensation):
    """dc normalizes by the mean square of the shard's own delta."""
    S = servers_or_skip(comm, S)
    check_sharded_replay(
        comm, "asgd", lambda x, log, f: reference.asgd(x, log, f, 1.0, None, "worker",
                                                        compensation, 0.5),
        S, staleness_compensation=compensation, **({"dc_lambda": 0.5} if compensation == "dc"
                                                   else {}))


def test_chunked_shard_messages_match_the_replay(comm):
    S = servers_or_skip(comm, 2)
    old = settings.set("PSGD_MPI_CHUNK", 4)
    try:
        check_sharded_replay(comm, "masgd",
                             lambda x, log, f: reference.asgd(x, log, f, 0.1, 0.9), S)
    finally:
        settings.set("PSGD_MPI_CHUNK", old)


def test_the_shard_replay_can_fail(comm):
    """dc's correction normalizes by the shard's own mean square: the replay
    of the whole model, sliced, is not what a shard holds (given staleness)."""
    S = servers_or_skip(comm, 2)
    if comm.size - S < 2:
        pytest.skip("staleness needs two workers")
    from server_plans import local, x0
    obj, _, logs = drive_sharded(comm, "asgd", S, staleness_compensation="dc")
    lo, hi = shard_bounds(SIZE, S)[1]
    log = logs[1][0]
    if log[:, 5].max(initial=0) < 1:
        pytest.skip("no stale delta in this run")
    per_shard = reference.asgd(x0()[lo:hi], log, lambda k, t: local(k, t)[lo:hi], 1.0,
                               compensation="dc")[0]
    whole = reference.asgd(x0(), log, local, 1.0, compensation="dc")[0][lo:hi]
    assert not np.allclose(per_shard, whole)
    if comm.rank == 1:
        np.testing.assert_allclose(host_copy(obj.center.data), per_shard, rtol=1e-12)


@pytest.mark.parametrize("name,options", [("easgd", {}), ("asgd", {"staleness_compensation": "dc"}),
                                          ("masgd", {"scope": "worker"}),
                                          ("masgd", {"scope": "global"})])
def test_state_dict_covers_every_shard(comm, name, options):
    S = servers_or_skip(comm, "max")
    obj, _, _ = drive_sharded(comm, name, S, **options)
    state = obj.state_dict()
    if obj.role == "server":
        lo, hi = obj.shard
        assert state["center"].shape == (hi - lo,)
        np.testing.assert_array_equal(state["center"], obj.buffer.data[lo:hi])
        if name == "masgd":
            rows = comm.size - S if options["scope"] == "worker" else 1
            assert state["velocity"].shape == (rows, hi - lo)
    else:
        assert state["w_prev"].shape == (SIZE,) if name != "easgd" else state == {}
    fresh = psgd.create(name, [np.zeros(s) for s in SHAPES], comm=comm, servers=S, **options)
    fresh.load_state_dict(state)
    for key, value in fresh.state_dict().items():
        np.testing.assert_array_equal(value, state[key])
    fresh.run() if fresh.role == "server" else fresh.stop(0)
    if comm.rank == 0:       # the loaded shards came back together on rank 0
        everything = np.empty(SIZE)
        everything[obj.shard[0]:obj.shard[1]] = state["center"]
    centers = comm.gather(None if obj.role != "server" else (obj.shard, state["center"]))
    if comm.rank == 0:
        for (lo, hi), center in filter(None, centers):
            np.testing.assert_array_equal(fresh.buffer.data[lo:hi], center)


def test_reset_to_reaches_every_shard(comm):
    S = servers_or_skip(comm, "max")
    obj, _, _ = drive_sharded(comm, "masgd", S)
    target = np.arange(SIZE, dtype=np.float64)
    obj.reset_to(target if comm.rank == 0 else None)
    if obj.role == "server":
        lo, hi = obj.shard
        np.testing.assert_array_equal(obj.center.data, target[lo:hi])
        assert all(not v.data.any() for v in obj.velocities)
    else:
        np.testing.assert_array_equal(obj.previous.data, target)
    obj.begin_round()
    obj.run() if obj.role == "server" else obj.stop(0)
    if comm.rank == 0:
        np.testing.assert_array_equal(obj.buffer.data, target)


# bad input ---------------------------------------------------------------------------
@pytest.mark.parametrize("name,servers,match", [
    ("bsp", 2, "bsp is a collective algorithm"),
    ("syncgrad", 1, "syncgrad is a collective algorithm"),
    ("easgd", 0, "servers must be an integer >= 1, got 0"),
    ("asgd", 1.5, "servers must be an integer >= 1, got 1.5"),
    ("masgd", True, "servers must be an integer >= 1, got True"),
    ("easgd", "size", "easgd with {size} servers needs at least {more} processes"),
])
def test_bad_server_counts_raise_on_every_rank(comm, name, servers, match):
    if servers == "size":
        servers = comm.size
    match = match.format(size=comm.size, more=comm.size + 1)
    grads = [np.zeros(3)] if name == "syncgrad" else None
    with pytest.raises(psgd.UsageError, match=match):
        psgd.create(name, [np.zeros(3)], comm=comm, grads=grads, servers=servers)
    assert comm.allreduce(1) == comm.size


def tight_worker(obj, k, syncs=40):
    """Syncs back to back: the shards see the workers' messages in different
    orders, and only the leader's order keeps their barriers together."""
    from server_plans import local
    flat, seen = obj.buffer.data, []
    for t in range(syncs):
        flat += obj.buffer.xp.asarray(local(k, t))
        obj.synchronize(1 + t % 4)
        seen.append(host_copy(flat))
    obj.stop(0)
    return seen, host_copy(flat)


@pytest.mark.parametrize("S", [2, 3, "max"])
@pytest.mark.parametrize("name,scope", [("asgd", None), ("masgd", "global")])
@pytest.mark.parametrize("period,tight", [(1, False), (3, False), (2, True)])
def test_barrier_per_shard_in_one_service_order(comm, S, name, scope, period, tight):
    """barrier_period with S servers: servers 1..S-1 serve in rank 0's order,
    so every shard logs the same syncs in the same order, holds the replies
    docs/algorithms.md's rule holds, and each center replays."""
    S = servers_or_skip(comm, S)
    from device_util import load
    from server_plans import local, x0
    jittery = load("algorithms/test_servers.py").jittery_worker
    worker = tight_worker if tight else jittery
    options = {} if scope is None else {"scope": scope}
    obj, result, logs = drive_sharded(comm, name, S, worker, barrier_period=period, **options)
    N = comm.size - S
    m, alpha = (None, 1.0) if name == "asgd" else (0.9, 0.1)
    for s, ((lo, hi), (log, finished)) in enumerate(zip(shard_bounds(SIZE, S), logs)):
        assert log[:, [0, 1, 2, 3]].tolist() == logs[0][0][:, [0, 1, 2, 3]].tolist(), s
        assert finished.tolist() == logs[0][1].tolist()
        assert log[:, 3].tolist() == reference.barrier_replies(log, finished, period,
                                                               range(S, comm.size))
        assert (log[:, 5] <= period + N - 2).all()
        center, after = reference.asgd(x0()[lo:hi], log, lambda k, t: local(k, t)[lo:hi],
                                       alpha, m, scope or "worker")
        if comm.rank == s:
            np.testing.assert_allclose(host_copy(obj.center.data), center, rtol=1e-12, atol=1e-12)
        elif comm.rank >= S:
            for t, w in enumerate(result[0]):
                np.testing.assert_allclose(w[lo:hi], after[comm.rank][t], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("to", [0, "last"])
def test_a_held_barrier_with_a_failing_shard_ends_without_a_hang(comm, to):
    """barrier_period = 1 (every reply held) and an unknown message to the
    leader or to a follower: every rank raises."""
    S = servers_or_skip(comm, 2)
    target = 0 if to == 0 else S - 1
    bad = comm.size - 1
    match = "unknown control message 7 from rank %d|server rank 0 stopped" % bad
    obj = psgd.create("asgd", [np.zeros(40)], comm=comm, servers=S, barrier_period=1)
    if obj.role == "server":
        with pytest.raises(ProtocolError, match=match):
            obj.run()
    elif comm.rank == bad:
        obj.synchronize(1)
        obj.comm.Send([np.array([7, 0], dtype=np.int64), MPI.INT64_T], dest=target,
                      tag=protocol.TAG_MSG)
        with pytest.raises(ProtocolError, match=match):
            obj.stop(0)
    else:
        with pytest.raises(ProtocolError, match=match):
            for _ in range(20000):
                obj.synchronize(1)
    assert comm.allreduce(1) == comm.size


# failure notices ---------------------------------------------------------------------
@pytest.mark.parametrize("to", ["first", "last"])
def test_an_unknown_message_to_one_shard_fails_every_rank(comm, to):
    S = servers_or_skip(comm, 2)
    if comm.size - S < 2:
        pytest.skip("needs two workers")
    target = 0 if to == "first" else S - 1
    bad = comm.size - 1
    match = "unknown control message 7 from rank %d" % bad
    obj = psgd.create("easgd", [np.zeros(40)], comm=comm, servers=S)
    if obj.role == "server":
        with pytest.raises(ProtocolError, match=match):
            obj.run()
    elif comm.rank == bad:
        obj.comm.Send([np.array([7, 0], dtype=np.int64), MPI.INT64_T], dest=target,
                      tag=protocol.TAG_MSG)
        with pytest.raises(ProtocolError, match=match):
            obj.stop(0)
    else:
        with pytest.raises(ProtocolError, match=match):
            for _ in range(20000):
                obj.synchronize(1)
    assert comm.allreduce(1) == comm.size


def test_a_failing_shard_update_stops_every_rank(comm):
    S = servers_or_skip(comm, 2)
    obj = psgd.create("asgd", [np.zeros(40)], comm=comm, servers=S)
    if comm.rank == S - 1:
        def broken(rank, lo, hi):
            raise FloatingPointError("update blew up")
        obj.update = broken
        with pytest.raises(FloatingPointError, match="blew up"):
            obj.run()
    elif obj.role == "server":
        with pytest.raises(ProtocolError, match="server rank %d stopped: it failed" % (S - 1)):
            obj.run()
    else:
        with pytest.raises(ProtocolError, match="asgd server \\(rank %d\\) stopped: it failed"
                           % (S - 1)):
            for _ in range(1000):
                obj.synchronize(1)
    assert comm.allreduce(1) == comm.size


@pytest.mark.parametrize("name,options,at_once,message", [
    ("asgd", {}, False, protocol.MSG_SYNC_WHEN_READY),
    ("easgd", {}, False, protocol.MSG_SYNC_WHEN_READY),
    ("masgd", {}, False, protocol.MSG_SYNC_WHEN_READY),
    ("asgd", {"barrier_period": 2}, True, protocol.MSG_SYNC)])
def test_workers_meet_their_servers_in_turns(comm, name, options, at_once, message):
    """Worker k (rank S + k) sends its sync to server (k + j) mod S in turn j,
    so two workers start on different servers, each pushing when its
    server is READY; with one service order (a barrier) every sync
    goes to every server at once. The replay still holds."""
    S = servers_or_skip(comm, 2)
    sent = []

    def recording(obj, k):
        send = obj._send_control
        obj._send_control = lambda message, n_k, servers=None: (
            sent.append((message, None if servers is None else list(servers))),
            send(message, n_k, servers))[-1]
        return sharded_worker(S)(obj, k)
    obj, _, _ = drive_sharded(comm, name, S, worker=recording, **options)
    syncs = [servers for sent_message, servers in sent if sent_message == message]
    assert all(sent_message in (message, protocol.MSG_FINISHED) for sent_message, _ in sent)
    assert comm.allreduce(len(syncs)) > 0          # some workers' plans sync no block
    if obj.role == "server":
        return
    k = comm.rank - S
    turns = [list(range(S))] if at_once else [[(k + j) % S] for j in range(S)]
    assert len(syncs) % len(turns) == 0 and syncs == turns * (len(syncs) // len(turns)), syncs
    assert [servers for sent_message, servers in sent
            if sent_message == protocol.MSG_FINISHED] == [None]


@pytest.mark.parametrize("size", [0, 1])
def test_a_sharded_worker_loads_the_compiled_loops_at_create(comm, monkeypatch, setting, size):
    """Not in its first large pulled() (easgd's lerp), inside a turn while
    the other workers wait for that server; a buffer too small for the
    loops (jit.MIN_SIZE) never loads them."""
    S = servers_or_skip(comm, 2)
    from psgd import jit, kernel_loops
    setting("PSGD_ACCEL", "auto")
    loads = []
    monkeypatch.setattr(kernel_loops.LOOPS, "compiled", None)
    monkeypatch.setattr(kernel_loops.LOOPS, "_compile", lambda: loads.append(1) or False)
    obj = psgd.create("easgd", [np.zeros(jit.MIN_SIZE - 1 + size, np.float32)], comm=comm,
                      servers=S)
    loaded = list(loads)
    obj.run() if obj.role == "server" else obj.stop()
    assert loaded == ([1] if obj.role != "server" and size else [])
