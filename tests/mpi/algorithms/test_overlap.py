"""easgd's workers leave their exchanges in flight (overlap="always";
psgd/algorithms/overlap.py): each pull lands one sync late, checked
against the serial replay of the server's log with late pulls; under
`auto` on one host nothing is left in flight, however slow the exchange."""
import time

import numpy as np
import pytest

import reference
from psgd.buffers import host_copy, shard_bounds
from server_plans import SIZE, drive, local, plan, x0
from shard_plans import drive_sharded

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(60)]

ALPHA = 0.5


def expected_final(k, after, owed):
    """Worker k's model after stop(): its last model as a sync returned
    (or x0), the training since, and the pull stop() landed."""
    syncs, last = plan(k)
    base = after[k][-1] if last else after.get(k, [x0()])[-1] + local(k, len(syncs))
    return base - owed.get(k, 0)


def syncing(count, prepare=None, compute=0.0):
    """A worker that trains (`compute` seconds) and syncs `count` times,
    then stops: (its model as each sync returned, its model after stop)."""
    def worker(obj, k):
        if prepare:
            prepare(obj)
        seen = []
        for t in range(count):
            time.sleep(compute)
            obj.buffer.data += local(k, t)
            obj.synchronize(1)
            seen.append(host_copy(obj.buffer.data))
        obj.stop()
        return seen, host_copy(obj.buffer.data)
    return worker


def test_each_pull_lands_one_sync_late(comm):
    check(comm)


def check(comm, xp=np):
    """The run against the late replay (the device tests run it with `xp`)."""
    obj, result, log, _ = drive(comm, "easgd", xp=xp, alpha=ALPHA, overlap="always")
    owed = {}
    center, after = reference.easgd(x0(), log, local, ALPHA, late=True, owed=owed)
    if obj.role == "server":
        np.testing.assert_allclose(host_copy(obj.buffer.data), center, rtol=1e-12, atol=1e-12)
        return obj
    k = comm.rank
    syncs, last = plan(k)
    seen, final = result
    assert obj.flight.left == len(syncs) + bool(last)
    assert len(seen) == len(syncs)
    for t, w in enumerate(seen):
        np.testing.assert_allclose(w, after[k][t], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(final, expected_final(k, after, owed), rtol=1e-12, atol=1e-12)
    assert not obj.flight.in_flight
    return obj


def test_each_shard_of_an_exchange_in_flight_replays(comm):
    """servers = 2: the control message and both shards go at once, not in
    turns; each shard's center and the workers' slices match its replay."""
    if comm.size < 4:
        pytest.skip("two servers and two workers need 4 ranks")

    obj, result, logs = drive_sharded(comm, "easgd", 2, worker=syncing(6), alpha=ALPHA,
                                      overlap="always")
    for s, ((lo, hi), (log, _)) in enumerate(zip(shard_bounds(SIZE, 2), logs)):
        owed = {}
        center, after = reference.easgd(x0()[lo:hi], log, lambda k, t: local(k, t)[lo:hi],
                                        ALPHA, late=True, owed=owed)
        if comm.rank == s:
            np.testing.assert_allclose(host_copy(obj.center.data), center, rtol=1e-12,
                                       atol=1e-12)
        elif comm.rank >= 2:
            seen, final = result
            for t, w in enumerate(seen):
                np.testing.assert_allclose(w[lo:hi], after[comm.rank][t], rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(final[lo:hi], after[comm.rank][-1] - owed[comm.rank],
                                       rtol=1e-12, atol=1e-12)


def test_auto_leaves_nothing_in_flight_on_one_host(comm):
    """The exchanges here take 20 ms, as long as the compute between syncs:
    across hosts `auto` would leave them in flight, on one host it still
    exchanges in line (the replay without late pulls)."""
    def slowly(obj):
        exchange = obj.exchange_with_server

        def slow(servers, replies):
            time.sleep(0.02)
            return exchange(servers, replies)
        obj.exchange_with_server = slow
    obj, result, log, _ = drive(comm, "easgd", worker=syncing(8, slowly, compute=0.02),
                                alpha=ALPHA)
    center, after = reference.easgd(x0(), log, local, ALPHA)
    if obj.role == "server":
        np.testing.assert_allclose(host_copy(obj.buffer.data), center, rtol=1e-12, atol=1e-12)
        return
    assert obj.overlap == "auto" and obj.flight.left == 0
    assert len(obj.flight.took) == 3 and min(obj.flight.took) >= 0.02
    for t, w in enumerate(result[0]):
        np.testing.assert_allclose(w, after[comm.rank][t], rtol=1e-12, atol=1e-12)
