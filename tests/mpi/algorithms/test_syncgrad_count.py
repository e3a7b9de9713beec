"""syncgrad's count travels inside the gradient sum (docs/algorithms.md, Fixes 8):
a sync is one reduction and nothing else, and a bad count still fails on
every rank."""
import numpy as np
import pytest

import psgd

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(60)]


class Counting:
    """A communicator that counts its reductions."""

    def __init__(self, comm):
        self.comm, self.calls = comm, 0

    def Allreduce(self, *args, **kwargs):
        self.calls += 1
        return self.comm.Allreduce(*args, **kwargs)

    def Iallreduce(self, *args, **kwargs):
        self.calls += 1
        return self.comm.Iallreduce(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.comm, name)


def test_a_sync_is_one_reduction(comm):
    sync = psgd.create("syncgrad", [np.zeros(5)], grads=[np.zeros(5)], comm=comm)
    counting = Counting(sync.comm)
    sync.comm = sync.node.comm = sync.grad_exchange.comm = counting
    sync.grads[0][...] = comm.rank + 1
    assert sync.synchronize(1 + comm.rank)
    assert counting.calls == 1
    b = sum(1 + k for k in range(comm.size))
    np.testing.assert_allclose(sync.grads[0], sum((1 + k) ** 2 for k in range(comm.size)) / b)
    sync.comm = sync.node.comm = sync.grad_exchange.comm = counting.comm
    sync.stop(0)


def test_a_bad_count_fails_on_every_rank_after_the_one_sum(comm):
    sync = psgd.create("syncgrad", [np.zeros(3)], grads=[np.zeros(3)], comm=comm)
    with pytest.raises(psgd.UsageError, match="n_k must be a non-negative integer"
                       if comm.rank == 1 else "1 rank\\(s\\) passed an invalid sample count"):
        sync.synchronize(-1 if comm.rank == 1 else 4)
    sync.stop(0)
