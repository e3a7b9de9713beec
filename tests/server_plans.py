"""The workers of the server-algorithm MPI tests: their tensors, their
deterministic local 'training', what each kind of worker syncs, and the
check of a run against a serial replay of the server's log."""
import numpy as np

import psgd
from psgd.buffers import host_copy

SHAPES = [(3, 4), (0,), (5,), (2, 1, 3)]
SIZE = sum(int(np.prod(s)) for s in SHAPES)
# worker kind -> (n_k of each synchronize, n_k passed to stop)
PLANS = {"many": ([3, 5, 2, 7, 4], 6), "never": ([], 0), "once": ([4], 0),
         "push_at_stop": ([], 5)}
KINDS = ["many", "never", "once", "push_at_stop"]


def plan(k):
    return PLANS[KINDS[(k - 1) % len(KINDS)]]


def initial(k):
    return [np.random.default_rng(k).standard_normal(s) for s in SHAPES]


def x0():
    return np.concatenate([a.ravel() for a in initial(0)])


def local(k, t):
    """The deterministic 'training' worker k does before its t-th sync."""
    return 0.1 * np.random.default_rng(1000 * k + t).standard_normal(SIZE)


def share_log(comm, obj, root=0):
    """Server `root`'s log (rank, n_k, order, reply, arrived, staleness) and
    finish list on every rank, as int64 arrays."""
    rows = fin = None
    if comm.rank == root:
        rows = np.array([[e.rank, e.n_k, e.order, -1 if e.reply is None else e.reply, e.arrived,
                          e.staleness] for e in obj.log], dtype=np.int64).reshape(-1, 6)
        fin = np.array(obj.finished, dtype=np.int64).reshape(-1, 2)
    shared = []
    for array, width in ((rows, 6), (fin, 2)):
        n = np.array([0 if array is None else len(array)], dtype=np.int64)
        comm.Bcast(n, root=root)
        if array is None:
            array = np.empty((int(n[0]), width), dtype=np.int64)
        comm.Bcast(array, root=root)
        shared.append(array)
    return shared


def uneven_worker(obj, k, kind=None):
    """Run worker k's plan (that of worker `kind`, when given); return its
    model after each synchronize and at the end."""
    syncs, last = plan(k if kind is None else kind)
    flat, seen = obj.buffer.data, []
    xp = obj.buffer.xp
    for t, n_k in enumerate(syncs):
        flat += xp.asarray(local(k, t))
        assert obj.synchronize(n_k) is True
        seen.append(host_copy(flat))
    flat += xp.asarray(local(k, len(syncs)))
    obj.stop(last)
    return seen, host_copy(flat)


def drive(comm, name, worker=uneven_worker, xp=np, **options):
    obj = psgd.create(name, [xp.asarray(a) for a in initial(comm.rank)], comm=comm, **options)
    result = obj.run() if obj.role == "server" else worker(obj, comm.rank)
    log, finished = share_log(comm, obj)
    return obj, result, log, finished


def check_replay(comm, name, replay, xp=np, **options):
    obj, result, log, finished = drive(comm, name, xp=xp, **options)
    center, after = replay(x0(), log, local)
    workers = list(range(1, comm.size))
    assert sorted(finished[:, 0].tolist()) == workers
    if comm.rank == 0:
        assert obj.role == "server"
        np.testing.assert_allclose(host_copy(obj.buffer.data), center, rtol=1e-12, atol=1e-12)
        stats = result
        assert stats.syncs == len(log) == obj.syncs
        assert stats.samples == log[:, 1].sum() == sum(sum(plan(k)[0]) + plan(k)[1]
                                                      for k in workers)
        assert stats.finished == comm.size - 1
        # the per-worker counters agree with the log, row by row
        for k in workers:
            mine = log[log[:, 0] == k]
            assert stats.per_worker[k] == [len(mine), int(mine[:, 1].sum())], k
    else:
        k = comm.rank
        syncs, last = plan(k)
        pushed = syncs + ([last] if last else [])
        assert log[log[:, 0] == k, 1].tolist() == pushed      # the log holds what k pushed
        seen, final = result
        for t, w in enumerate(seen):
            np.testing.assert_allclose(w, after[k][t], rtol=1e-12, atol=1e-12)
        if last:
            expected = after[k][-1]
        else:
            expected = after.get(k, [x0()])[-1] + local(k, len(syncs))
        np.testing.assert_allclose(final, expected, rtol=1e-12, atol=1e-12)
    return obj, log, finished
