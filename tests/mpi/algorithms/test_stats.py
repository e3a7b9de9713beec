"""stats= (BatchNorm running statistics) under mpirun: they start as rank
0's, like the model, and every sync averages them with the model's weights:
by samples, or uniformly under bsp's weighting=uniform."""
import numpy as np
import pytest
from mpi4py import MPI

import psgd

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(60)]

SHAPES = [(3,), (2, 2)]


def arrays(seed):
    return [np.random.default_rng(seed).standard_normal(s) for s in SHAPES]


def flat(views):
    return np.concatenate([v.ravel() for v in views])


@pytest.mark.parametrize("name, options, uniform", [
    ("bsp", {}, False), ("bsp", {"weighting": "uniform"}, True), ("bmuf", {}, False),
    ("sod", {}, False)])
def test_stats_start_as_rank_0s_and_are_averaged_like_the_model(comm, name, options, uniform):
    sync = psgd.create(name, arrays(comm.rank), comm=comm, stats=arrays(100 + comm.rank),
                       **options)
    started = np.array([np.array_equal(flat(sync.stats), flat(arrays(100)))], dtype=np.int64)
    comm.Allreduce(MPI.IN_PLACE, [started, MPI.INT64_T], op=MPI.MIN)
    assert started[0], "stats did not start as rank 0's on every rank"
    counts = [2 * k + 1 for k in range(comm.size)]
    # Each rank's statistics after its block of counts[k] samples:
    local = [flat(arrays(200 + k)) for k in range(comm.size)]
    for view, value in zip(sync.stats, np.split(local[comm.rank], [3])):
        view[...] = value.reshape(view.shape)
    sync.synchronize(counts[comm.rank])
    if uniform:
        want = sum(local) / comm.size
    else:
        want = sum(n * s for n, s in zip(counts, local)) / sum(counts)
    np.testing.assert_allclose(flat(sync.stats), want, rtol=1e-12)
    sync.stop(0)
    sync.close()
