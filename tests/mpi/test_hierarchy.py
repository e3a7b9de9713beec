"""The two-level sum (psgd/hierarchy.py) on one machine, hosts faked by
rank where a test needs several: uneven hosts ({0, 1}, {2, 3}, {4} at
np 5), one rank per host, and the real shared-memory split (one host).
Integer-valued floats sum exactly in any order, so the result equals the
flat Allreduce bit for bit; other values to rounding. The leaders' exchange
runs once, on the leaders only, and what it leaves is what every rank of
the host gets."""
import numpy as np
import pytest
from mpi4py import MPI

from psgd import hierarchy
from psgd.mpi import mpi_type

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(60)]

SIZE = 1001
SPLITS = {"pairs": lambda rank: rank // 2, "one per host": lambda rank: rank,
          "shared memory": lambda rank: None}


def _data(rank, dtype, integers):
    rng = np.random.default_rng(100 + rank)
    if integers:
        return rng.integers(-1000, 1000, SIZE).astype(dtype)
    return rng.standard_normal(SIZE).astype(dtype)


def _flat(comm, data):
    out = data.copy()
    comm.Allreduce(MPI.IN_PLACE, [out, mpi_type(out.dtype)], op=MPI.SUM)
    return out


@pytest.mark.parametrize("split", sorted(SPLITS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_equals_the_flat_sum(comm, split, dtype):
    levels = hierarchy.create(comm, SPLITS[split](comm.rank))
    try:
        exact = _data(comm.rank, dtype, integers=True)
        want = _flat(comm, exact)
        got = levels.sum(exact.copy(), hierarchy.allreduce)
        assert got.tobytes() == want.tobytes()
        rounded = _data(comm.rank, dtype, integers=False)
        got = levels.sum(rounded.copy(), hierarchy.allreduce)
        np.testing.assert_allclose(got, _flat(comm, rounded), rtol=1e-5, atol=1e-5)
    finally:
        levels.close()


def test_leaders_exchange_once_and_hand_it_to_their_host(comm):
    """The leaders' callable sees one rank per host, in host order, and what
    it leaves (here the sum plus its leaders' count) reaches every rank."""
    host = comm.rank // 2
    levels = hierarchy.create(comm, host)
    calls = []

    def marked_sum(leaders, array):
        calls.append((leaders.Get_rank(), leaders.Get_size()))
        hierarchy.allreduce(leaders, array)
        array += leaders.Get_size()

    try:
        hosts = (comm.size + 1) // 2
        data = np.full(7, comm.rank + 1, np.float64)
        levels.sum(data, marked_sum)
        assert calls == ([(host, hosts)] if comm.rank % 2 == 0 else [])
        assert levels.hosts == (hosts if comm.rank % 2 == 0 else None)
        np.testing.assert_array_equal(data, sum(range(1, comm.size + 1)) + hosts)
    finally:
        levels.close()
    assert levels.local == MPI.COMM_NULL and levels.leaders == MPI.COMM_NULL


def test_totals_are_summed_beside_the_data_and_reach_every_rank(comm):
    levels = hierarchy.create(comm, comm.rank // 2)

    def flagging_sum(leaders, array, totals):
        if leaders.Get_rank() == leaders.Get_size() - 1:
            totals[2] += 1                     # e.g. an overflow the last leader found
        hierarchy.allreduce(leaders, array)
        hierarchy.allreduce(leaders, totals)

    try:
        data = np.full(5, 2.0, np.float32)
        totals = np.array([32 + comm.rank, comm.rank == 1, 0], np.int64)
        levels.sum(data, flagging_sum, totals)
        np.testing.assert_array_equal(data, 2.0 * comm.size)
        assert totals.tolist() == [sum(32 + r for r in range(comm.size)), 1, 1]
    finally:
        levels.close()
