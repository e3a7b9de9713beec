"""sync.reset_to(params) for every algorithm under mpirun: after some
training has filled the algorithm's state (bmuf's w_g and D, sod's outer
velocity and moments, the server's center and velocities, every worker's
w_prev), reset_to(M) must leave an object whose following syncs equal, to
the bit, those of a fresh psgd.create from M. Server-algorithm workers take
turns (one worker at a time, in rank order) so the server's order of
service, and so the numbers, are the same in both runs."""
import numpy as np
import pytest
from mpi4py import MPI

import psgd
from psgd.errors import UsageError

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(60)]

SHAPES = [(3, 4), (5,), (2, 1, 3)]
SIZE = sum(int(np.prod(s)) for s in SHAPES)
# The outer state with the most to restart; block_lr != 1 so that bmuf reads
# its old D (at zeta = 1 under Nesterov the update folds D out).
OPTIONS = {"sod": {"outer": "adam"}, "bmuf": {"block_lr": 0.5}}
# Per-worker state on the server: dc keeps the center each worker last got.
VARIANTS = list(psgd.ALGORITHMS) + ["asgd+dc", "masgd+dc"]
VARIANT_OPTIONS = {"asgd+dc": {"staleness_compensation": "dc"},
                   "masgd+dc": {"staleness_compensation": "dc"}}


def model(seed):
    return [np.random.default_rng(seed).standard_normal(s) for s in SHAPES]


def step(rank, t, seed):
    return 0.1 * np.random.default_rng(10000 * seed + 100 * rank + t).standard_normal(SIZE)


def session(obj, comm, workers, seed, rounds=3):
    """Deterministic 'training' for a few syncs, then stop; returns this
    rank's model after every sync and at the end (the server: its center)."""
    rank, flat, seen = comm.rank, obj.buffer.data, []
    if obj.role == "server":
        obj.run()
        return [flat.copy()]
    if obj.name == "syncgrad":
        g = obj.grad_buffer.data
        for t in range(rounds):
            g[...] = step(rank, t, seed)
            obj.synchronize(rank + 1)
            flat -= 0.5 * g
            seen.append(flat.copy())
        obj.stop(0, step=lambda: None)
        return seen + [flat.copy()]

    def train():
        for t in range(rounds):
            flat[...] += step(rank, t, seed)
            obj.synchronize(rank + 1)
            seen.append(flat.copy())
        flat[...] += step(rank, rounds, seed)
        obj.stop(rank + 2)

    if obj.server_based:
        for turn in range(workers.size):      # one worker at a time: a fixed service order
            if workers.rank == turn:
                train()
            workers.Barrier()
    else:
        train()
    return seen + [flat.copy()]


def everywhere(comm, ok):
    """Collective: True on every rank when `ok` on every rank (so a rank that
    fails does not leave the others waiting in the next sync)."""
    flag = np.array([bool(ok)], dtype=np.int64)
    comm.Allreduce(MPI.IN_PLACE, [flag, MPI.INT64_T], op=MPI.MIN)
    return bool(flag[0])


def same(a, b):
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))


def create(name, comm, params):
    options = VARIANT_OPTIONS.get(name, OPTIONS.get(name, {}))
    name = name.split("+")[0]
    grads = [np.zeros(s) for s in SHAPES] if name == "syncgrad" else None
    return psgd.create(name, params, comm=comm, grads=grads, **options)


@pytest.mark.parametrize("name", VARIANTS)
def test_syncs_after_reset_to_equal_a_fresh_create(comm, name):
    workers = comm.Split(0 if comm.rank > 0 else 1, comm.rank)
    try:
        target = model(99)
        used = create(name, comm, model(comm.rank))
        session(used, comm, workers, seed=1)
        # Only rank 0's model counts: the others pass junk or nothing.
        used.reset_to(target if comm.rank == 0 else (None if comm.rank % 2 else model(7)))
        assert everywhere(comm, same(used.params, target)), "replicas differ from rank 0's model"
        used.begin_round()
        after_reset = session(used, comm, workers, seed=2)

        fresh = create(name, comm, target if comm.rank == 0 else model(comm.rank + 50))
        from_fresh = session(fresh, comm, workers, seed=2)
        assert everywhere(comm, same(after_reset, from_fresh)), \
            "syncs after reset_to differ from a fresh create's"
        used.close()
        fresh.close()
    finally:
        workers.Free()


@pytest.mark.parametrize("name", ["bmuf", "asgd"])
def test_reset_to_takes_a_flat_model_and_refuses_a_wrong_one_on_every_rank(comm, name):
    workers = comm.Split(0 if comm.rank > 0 else 1, comm.rank)
    try:
        with create(name, comm, model(comm.rank)) as obj:
            flat = np.concatenate([a.ravel() for a in model(5)])
            obj.reset_to(flat if comm.rank == 0 else None)
            np.testing.assert_array_equal(obj.buffer.data, flat)
            with pytest.raises(UsageError, match="rank 0.*shape"):
                obj.reset_to(flat[:-1] if comm.rank == 0 else None)
            with pytest.raises(UsageError, match="must pass the model"):
                obj.reset_to(None)
    finally:
        workers.Free()

