"""The current-device rule at psgd.create: arrays on a GPU that is not the
current one are refused on the rank that has them, in psgd's words, on
every rank (the simulated device has two GPUs)."""
import pytest

import psgd
from psgd.errors import UsageError

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(60)]


def test_arrays_on_a_gpu_that_is_not_current_are_refused_at_create(comm, sim):
    """Not "peer access is unavailable" from deep inside the first sync."""
    with sim.cuda.Device(1):
        w = sim.zeros(3)
    elsewhere = comm.rank == 0
    params = [w] if elsewhere else [sim.zeros(3)]
    with pytest.raises(UsageError, match=r"rank 0: params\[0\] is on GPU 1 while GPU 0 is "
                                         r"current: make GPU 1 current first"):
        psgd.create("bsp", params, comm=comm)
    with sim.cuda.Device(1 if elsewhere else 0):
        sync = psgd.create("bsp", params, comm=comm)
        sync.synchronize(1)
        sync.stop(0)
