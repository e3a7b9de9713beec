"""The server algorithms serve a worker whose exchanges crawl in the
background (psgd/algorithms/in_flight.py): the last rank here delays its
model traffic by SLOW_S each sync, as a slow link would, and the others
sync meanwhile. Each run is checked against the serial replay in the order
the updates were applied."""
import time

import numpy as np
import pytest
from mpi4py import MPI

import psgd
import reference
from psgd import protocol
from psgd.algorithms import in_flight
from psgd.buffers import host_copy
from psgd.errors import ProtocolError
from psgd.buffers import shard_bounds
from server_plans import SIZE, drive, local, x0
from shard_plans import drive_sharded

pytestmark = [pytest.mark.mpi(min_size=3), pytest.mark.timeout(60)]

SLOW_S = 0.04       # well past in_flight.SLOW_MIN_S and a fast exchange here
# the first RECENT of the slow worker's syncs are served in line, then it is slow
SLOW_SYNCS, FAST_SYNCS = in_flight.RECENT + 3, 80
ALPHA = 0.5


def crawl(obj):
    """Delay this worker's model traffic by SLOW_S each sync."""
    exchange = obj.exchange_with_server

    def slowly(servers, replies):
        time.sleep(SLOW_S)
        return exchange(servers, replies)
    obj.exchange_with_server = slowly


def worker(obj, k):
    slow = k == obj.comm.size - 1
    if slow:
        crawl(obj)
    seen, xp = [], obj.buffer.xp
    for t in range(SLOW_SYNCS if slow else FAST_SYNCS):
        obj.buffer.data += xp.asarray(local(k, t))
        assert obj.synchronize(1) is True
        seen.append(host_copy(obj.buffer.data))
        if not slow:
            time.sleep(0.003)       # the fast workers sync throughout the slow one's syncs
    obj.stop()
    return seen


def cases(N):
    """name -> (algorithm, options, replay); masgd's delayed update over
    D = N updates, whose count must follow the updates, not the dispatches."""
    D, m = N, 0.9
    return {
        "easgd": ("easgd", {"alpha": ALPHA},
                  lambda x, log, f: reference.easgd(x, log, f, ALPHA)),
        "easgd scale": ("easgd", {"alpha": ALPHA, "staleness_compensation": "scale"},
                        lambda x, log, f: reference.easgd(x, log, f, ALPHA, workers=N)),
        "asgd": ("asgd", {}, lambda x, log, f: reference.asgd(x, log, f, 1.0)),
        "asgd dc": ("asgd", {"staleness_compensation": "dc"},
                    lambda x, log, f: reference.asgd(x, log, f, 1.0, compensation="dc")),
        "masgd": ("masgd", {}, lambda x, log, f: reference.asgd(x, log, f, 1 - m, m, "worker")),
        "masgd delayed": ("masgd", {"delayed": True},
                          lambda x, log, f: reference.asgd(x, log, f, D * (1 - m), m, delay=D)),
    }


@pytest.mark.parametrize("case", ["easgd", "easgd scale", "asgd", "asgd dc", "masgd",
                                  "masgd delayed"])
def test_a_crawling_exchange_is_served_in_the_background(comm, case):
    check(comm, case)


def test_easgd_scales_the_rate_on_the_slow_workers_stale_models(comm):
    """staleness_compensation=scale: the slow worker's models arrive more
    than a round of the others late (tau > N) and move the center by
    alpha * N / tau; the replay at the plain alpha does not match."""
    name, options, replay = cases(comm.size - 1)["easgd scale"]
    obj, _, log, _ = drive(comm, name, worker=worker, **options)
    assert (log[:, 5] > comm.size - 1).any()
    if obj.role == "server":
        center = host_copy(obj.buffer.data)
        np.testing.assert_allclose(center, replay(x0(), log, local)[0], rtol=1e-12, atol=1e-12)
        assert not np.allclose(center, reference.easgd(x0(), log, local, ALPHA)[0], rtol=1e-9)


def check(comm, case="easgd", xp=np):
    """The run against the replay (the device tests run it with `xp`)."""
    name, options, replay = cases(comm.size - 1)[case]
    obj, result, log, finished = drive(comm, name, worker=worker, xp=xp, **options)
    center, after = replay(x0(), log, local)
    slow = comm.size - 1
    mine = log[log[:, 0] == slow]
    assert len(mine) == SLOW_SYNCS
    if name == "easgd":
        # others' updates landed between the x it was sent and its own update
        assert (mine[:, 3] < mine[:, 2]).sum() >= 1, mine
        assert (log[log[:, 0] != slow][:, 3] == log[log[:, 0] != slow][:, 2]).mean() > 0.5
    else:
        assert (log[:, 3] == log[:, 2] + 1).all()   # the reply follows its own update
    started = comm.bcast(obj.in_flight.started if obj.role == "server" else None, root=0)
    assert started >= 1                             # it was served in the background
    if obj.role == "server":
        np.testing.assert_allclose(host_copy(obj.buffer.data), center, rtol=1e-12, atol=1e-12)
        assert len(obj.in_flight) == 0
        assert obj.stats.syncs == len(log) == (comm.size - 2) * FAST_SYNCS + SLOW_SYNCS
    else:
        for t, w in enumerate(result):
            np.testing.assert_allclose(w, after[comm.rank][t], rtol=1e-12, atol=1e-12)
    return obj


@pytest.mark.parametrize("case", ["easgd", "asgd"])
def test_each_shard_server_serves_the_slow_worker_in_the_background(comm, case):
    """servers = 2: each shard's server times and serves the slow worker on
    its own; every shard's center and the workers' slices match its replay."""
    if comm.size < 4:
        pytest.skip("two servers and two workers need 4 ranks")
    name, options, replay = cases(comm.size - 2)[case]
    obj, result, logs = drive_sharded(comm, name, 2, worker=worker, **options)
    for s, ((lo, hi), (log, _)) in enumerate(zip(shard_bounds(SIZE, 2), logs)):
        center, after = replay(x0()[lo:hi], log, lambda k, t: local(k, t)[lo:hi])
        if comm.rank == s:
            np.testing.assert_allclose(host_copy(obj.center.data), center, rtol=1e-12,
                                       atol=1e-12)
        elif comm.rank >= 2:
            for t, w in enumerate(result):
                np.testing.assert_allclose(w[lo:hi], after[comm.rank][t], rtol=1e-12,
                                           atol=1e-12)
    assert comm.allreduce(obj.in_flight.started if obj.role == "server" else 0) >= 1


@pytest.mark.parametrize("name", ["easgd", "asgd"])
def test_a_server_giving_up_completes_the_transfer_in_flight_first(comm, name):
    """A bad control message while the slow worker's exchange is in flight:
    every rank raises, none hangs."""
    bad = 1
    obj = psgd.create(name, [np.zeros(1000)], comm=comm)
    match = "unknown control message 7 from rank %d" % bad
    if obj.role == "server":
        with pytest.raises(ProtocolError, match=match):
            obj.run()
        assert len(obj.in_flight) == 0 and obj.in_flight.started >= 1
    elif comm.rank == bad:
        for _ in range(3):
            obj.synchronize(1)
        deadline = time.time() + 20      # the slow worker's second exchange, in flight
        while time.time() < deadline and not comm.Iprobe(source=comm.size - 1, tag=99):
            time.sleep(0.001)
        comm.Recv([np.zeros(1), MPI.DOUBLE], source=comm.size - 1, tag=99)
        time.sleep(SLOW_S / 4)
        obj.comm.Send([np.array([7, 0], dtype=np.int64), MPI.INT64_T], dest=0,
                      tag=protocol.TAG_MSG)
        with pytest.raises(ProtocolError, match=match):
            obj.stop(0)
    else:
        if comm.rank == comm.size - 1:
            crawl(obj)
        with pytest.raises(ProtocolError, match=match):
            for t in range(200):
                if comm.rank == comm.size - 1 and t == in_flight.RECENT:   # the next is in flight
                    comm.Send([np.zeros(1), MPI.DOUBLE], dest=bad, tag=99)
                obj.synchronize(1)
                time.sleep(0.003)
    assert comm.allreduce(1) == comm.size

