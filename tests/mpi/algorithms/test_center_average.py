"""The server's running average of its center (center_average.py): replayed
serially from each server's log, gathered whole on rank 0 with shards, kept
in checkpoints and restarted by reset_to."""
import math

import numpy as np
import pytest

import psgd
from psgd.algorithms.center_average import FOLDS
from psgd.buffers import host_copy, shard_bounds
from server_plans import initial, local, x0

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(60)]

H = 20.0                      # examples: a fold every 2.5, so most syncs fold
SAMPLES = [3, 1, 4, 1, 5, 9]  # each worker's n_k, sync by sync


def one_round(obj, k):
    flat, xp = obj.buffer.data, obj.buffer.xp
    if obj.role == "server":
        return obj.run()
    for t, n_k in enumerate(SAMPLES):
        flat += xp.asarray(local(k, t))
        obj.synchronize(n_k)
    obj.stop(0)


def replay(log, lo, hi):
    """x and a over [lo, hi) from a server's log, asgd with alpha 1: each
    delta is the worker's local() for that sync, a folds as the server does."""
    x = x0()[lo:hi].copy()
    a, pending, count = x.copy(), 0.0, {}
    for entry in log:
        t = count.get(entry.rank, 0)
        count[entry.rank] = t + 1
        x += local(entry.rank, t)[lo:hi]
        pending += entry.n_k
        if pending >= H / FOLDS:
            a += (1 - math.exp(-pending / H)) * (x - a)
            pending = 0.0
    if pending:
        a += (1 - math.exp(-pending / H)) * (x - a)
    return x, a


def check_average(comm, servers, xp=np):
    """One asgd round with `servers` servers; rank 0's x and a against the
    replay of every server's log."""
    obj = psgd.create("asgd", [xp.asarray(a) for a in initial(0)], comm=comm, alpha=1.0,
                      servers=servers, average_examples=H)
    one_round(obj, comm.rank)
    bounds = shard_bounds(obj.buffer.size, servers)
    mine = replay(obj.log, *bounds[comm.rank]) if obj.role == "server" else None
    shards = comm.gather(mine, root=0)
    if comm.rank == 0:
        x = np.concatenate([s[0] for s in shards[:servers]])
        a = np.concatenate([s[1] for s in shards[:servers]])
        np.testing.assert_allclose(host_copy(obj.buffer.data), x, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(host_copy(obj.model_buffer.data), a, rtol=1e-12, atol=1e-12)
        assert np.abs(a - x).max() > 1e-3        # the average is not the center
    return obj


@pytest.mark.parametrize("servers", [1, 2])
def test_the_average_is_the_replay_of_each_servers_log(comm, servers):
    if comm.size <= servers:
        pytest.skip("needs a worker beside %d servers" % servers)
    check_average(comm, servers).close()


def test_state_keeps_the_average_and_reset_to_restarts_it(comm):
    obj = psgd.create("asgd", initial(0), comm=comm, alpha=1.0, average_examples=H)
    one_round(obj, comm.rank)
    if obj.role == "server":
        state = obj.state_dict()
        np.testing.assert_array_equal(state["average"], obj.model_buffer.data)
        kept = state["average"].copy()
        obj.model_buffer.data[...] = 0
        obj.load_state_dict(state)
        np.testing.assert_array_equal(obj.model_buffer.data, kept)
        # a checkpoint of a job that kept no average: a starts at x
        obj.load_state_dict({"center": state["center"]})
        np.testing.assert_array_equal(obj.model_buffer.data, state["center"])
    obj.reset_to(initial(7) if comm.rank == 0 else None)
    if obj.role == "server":
        np.testing.assert_array_equal(obj.model_buffer.data,
                                      np.concatenate([a.ravel() for a in initial(7)]))
    obj.close()


def test_without_an_average_the_model_is_the_center(comm):
    obj = psgd.create("easgd", initial(0), comm=comm)
    assert obj.options["average_examples"] == 0
    one_round(obj, comm.rank)
    if obj.role == "server":
        assert obj.model_buffer is obj.buffer and "average" not in obj.state_dict()
    obj.close()


def test_a_negative_horizon_is_refused_on_every_rank(comm):
    with pytest.raises(psgd.UsageError, match="average_examples=-1.0: must be >= 0"):
        psgd.create("masgd", initial(0), comm=comm, average_examples=-1.0)
