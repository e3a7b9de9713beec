"""The sharded-server checks (servers = S > 1): every shard's center, and
every worker's slice of that shard, against a serial replay of docs/algorithms.md
in the order that shard's own server logged, restricted to the shard."""
import numpy as np

import psgd
from psgd.buffers import host_copy, shard_bounds
from server_plans import SIZE, initial, local, plan, share_log, uneven_worker, x0


def kind(k, servers):
    """The plan of worker k: the first worker syncs many times, whatever S is."""
    return k - servers + 1


def sharded_worker(servers):
    return lambda obj, k: uneven_worker(obj, k, kind(k, servers))


def drive_sharded(comm, name, servers, worker=None, xp=np, shapes=None, **options):
    arrays = initial(comm.rank) if shapes is None else [
        np.random.default_rng(comm.rank).standard_normal(s) for s in shapes]
    obj = psgd.create(name, [xp.asarray(a) for a in arrays], comm=comm, servers=servers,
                      **options)
    worker = worker or sharded_worker(servers)
    result = obj.run() if obj.role == "server" else worker(obj, comm.rank)
    logs = [share_log(comm, obj, root=s) for s in range(servers)]
    return obj, result, logs


def check_sharded_replay(comm, name, replay, servers, xp=np, **options):
    """`replay(x0, log, local) -> (center, models after each sync)` as in
    tests/reference.py. Returns (obj, [(log, finished) of each shard])."""
    obj, result, logs = drive_sharded(comm, name, servers, xp=xp, **options)
    bounds = shard_bounds(SIZE, servers)
    workers = list(range(servers, comm.size))
    whole = np.concatenate([replay(x0()[lo:hi], log, lambda k, t: local(k, t)[lo:hi])[0]
                            for (lo, hi), (log, _) in zip(bounds, logs)])
    assert obj.servers == servers
    for s, ((lo, hi), (log, finished)) in enumerate(zip(bounds, logs)):
        center, after = replay(x0()[lo:hi], log, lambda k, t: local(k, t)[lo:hi])
        assert sorted(finished[:, 0].tolist()) == workers
        plans = {k: plan(kind(k, servers)) for k in workers}
        pushed = {k: syncs + ([last] if last else []) for k, (syncs, last) in plans.items()}
        for k in workers:                      # every shard served every sync of k
            assert log[log[:, 0] == k, 1].tolist() == pushed[k], (s, k)
        if comm.rank == s:
            assert obj.role == "server" and obj.shard == (lo, hi)
            np.testing.assert_allclose(host_copy(obj.center.data), center,
                                       rtol=1e-12, atol=1e-12)
            stats = result
            assert stats.syncs == len(log) == obj.syncs
            assert stats.finished == len(workers)
            for k in workers:
                mine = log[log[:, 0] == k]
                assert stats.per_worker[k] == [len(mine), int(mine[:, 1].sum())], k
        elif comm.rank >= servers:
            k = comm.rank
            seen, final = result
            for t, w in enumerate(seen):
                np.testing.assert_allclose(w[lo:hi], after[k][t], rtol=1e-12, atol=1e-12)
            syncs, last = plans[k]
            if last:
                expected = after[k][-1]
            else:
                expected = after.get(k, [x0()[lo:hi]])[-1] + local(k, len(syncs))[lo:hi]
            np.testing.assert_allclose(final[lo:hi], expected, rtol=1e-12, atol=1e-12)
    if comm.rank == 0:       # after run(): rank 0's params hold every shard of the center
        np.testing.assert_allclose(host_copy(obj.buffer.data), whole, rtol=1e-12, atol=1e-12)
    return obj, logs
