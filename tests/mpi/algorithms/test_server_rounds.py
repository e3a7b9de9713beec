"""Server algorithms over several rounds (the trainer's epochs)."""
import numpy as np
import pytest

import psgd
from server_plans import initial, local, x0

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(60)]


def test_rounds_one_run_per_epoch(comm):
    """The trainer's epochs: stop() and run() end a round, begin_round() on
    every rank opens the next; asgd with alpha 1 adds every delta exactly."""
    obj = psgd.create("asgd", initial(0), comm=comm, alpha=1.0)
    flat = obj.buffer.data
    for rnd in range(3):
        if rnd:
            obj.begin_round()
        if obj.role == "server":
            stats = obj.run()
            assert stats.syncs == 2 * (rnd + 1) * (comm.size - 1)
        else:
            for t in range(2):
                flat += local(comm.rank, 10 * rnd + t)
                obj.synchronize(1)
            obj.stop(0)
    if obj.role == "server":
        expected = x0() + sum(local(k, 10 * rnd + t) for k in range(1, comm.size)
                              for rnd in range(3) for t in range(2))
        np.testing.assert_allclose(flat, expected, rtol=1e-12, atol=1e-12)
        with pytest.raises(psgd.UsageError, match="begin_round"):
            obj.run()
    else:
        with pytest.raises(psgd.UsageError, match="begin_round"):
            obj.synchronize(1)
