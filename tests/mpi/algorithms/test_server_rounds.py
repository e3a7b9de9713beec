"""Server algorithms over several rounds (the trainer's epochs)."""
import numpy as np
import pytest

import psgd
from server_plans import initial, local, x0

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(60)]


def rounds(comm, obj, count, between=None):
    """`count` rounds: each worker adds local() twice and syncs, then
    stops; the server runs; `between(rnd)` on the server before round rnd
    > 0. The server's stats of each round."""
    flat, served = obj.buffer.data, []
    for rnd in range(count):
        if rnd:
            if between is not None and obj.role == "server":
                between(rnd)
            obj.begin_round()
        if obj.role == "server":
            served.append(obj.run())
        else:
            for t in range(2):
                flat += local(comm.rank, 10 * rnd + t)
                obj.synchronize(1)
            obj.stop(0)
    return served


def test_rounds_one_run_per_epoch(comm):
    """The trainer's epochs: stop() and run() end a round, begin_round() on
    every rank opens the next; asgd with alpha 1 adds every delta exactly."""
    obj = psgd.create("asgd", initial(0), comm=comm, alpha=1.0)
    flat = obj.buffer.data
    served = rounds(comm, obj, 3)
    if obj.role == "server":
        assert [s.syncs for s in served] == [2 * r * (comm.size - 1) for r in (1, 2, 3)]
        expected = x0() + sum(local(k, 10 * rnd + t) for k in range(1, comm.size)
                              for rnd in range(3) for t in range(2))
        np.testing.assert_allclose(flat, expected, rtol=1e-12, atol=1e-12)
        with pytest.raises(psgd.UsageError, match="begin_round"):
            obj.run()
    else:
        with pytest.raises(psgd.UsageError, match="begin_round"):
            obj.synchronize(1)


def test_asgd_alpha_set_between_rounds_is_the_gain_of_the_next(comm):
    """The trainer's mean delta by the summed pace: set_alpha on the
    server between rounds; every delta of a round added at that round's
    gain. A bad alpha is refused in one line."""
    alphas = [1.0, 0.25, 0.5]
    obj = psgd.create("asgd", initial(0), comm=comm, alpha=alphas[0])
    flat = obj.buffer.data
    rounds(comm, obj, len(alphas), between=lambda rnd: obj.set_alpha(alphas[rnd]))
    if obj.role == "server":
        expected = x0() + sum(alpha * local(k, 10 * rnd + t) for k in range(1, comm.size)
                              for rnd, alpha in enumerate(alphas) for t in range(2))
        np.testing.assert_allclose(flat, expected, rtol=1e-12, atol=1e-12)
        with pytest.raises(psgd.UsageError, match="asgd: alpha must be > 0"):
            obj.set_alpha(0.0)
