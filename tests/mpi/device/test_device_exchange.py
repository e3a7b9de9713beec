"""psgd.mpi.Exchange and the hybrid network's Collectives on device buffers
(simulated, or a GPU), staged and direct: every call must see the work
queued on the stream before it, and leave nothing queued that reads or
writes what MPI handed over."""
import numpy as np
import pytest

from psgd import mpi, settings
from psgd.buffers import FlatBuffer, host_copy
from psgd.nnet.parallel.collectives import Collectives

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(60)]


def device_buffer(xp, rank, size=11):
    values = np.arange(size, dtype=np.float64) + 100 * rank
    return FlatBuffer.pack([xp.asarray(values[:4].reshape(2, 2)), xp.asarray(values[4:])])


def settled(xp):
    """Nothing left on the stream (rule 1 and 2: MPI's buffers are done)."""
    return xp.cuda.get_current_stream().done


@pytest.mark.parametrize("chunk", [None, 3])
def test_blocking_calls_see_the_last_kernel(comm, xp, chunk):
    old = settings.set("PSGD_MPI_CHUNK", chunk) if chunk else None
    try:
        rank, size = comm.rank, comm.size
        buf = device_buffer(xp, rank)
        ex = mpi.Exchange(comm, buf)
        base = np.arange(11.0)
        buf.data *= 2                        # queued: MPI must send the doubled model
        ex.allreduce()
        assert settled(xp)
        np.testing.assert_array_equal(host_copy(buf.data),
                                      2 * (size * base + 100 * sum(range(size))))
        buf.data.fill(rank)
        ex.bcast(root=size - 1)
        assert settled(xp)
        np.testing.assert_array_equal(host_copy(buf.data), size - 1)
        other = buf.like()
        peer = rank ^ 1
        if peer < size:
            buf.data += 1                    # queued before the exchange
            ex.sendrecv(peer, mpi.Exchange(comm, other))
            assert settled(xp)
            np.testing.assert_array_equal(host_copy(other.data), size)
        nxt, prev = (rank + 1) % size, (rank - 1) % size
        buf.data.fill(rank)
        if rank % 2 == 0:
            ex.send(nxt)
            mpi.Exchange(comm, other).recv(prev)
        else:
            mpi.Exchange(comm, other).recv(prev)
            ex.send(nxt)
        np.testing.assert_array_equal(host_copy(other.data), prev)
    finally:
        if old:
            settings.set("PSGD_MPI_CHUNK", old)


def test_nonblocking_calls_stage_in_before_wait_returns(comm, xp):
    rank, size = comm.rank, comm.size
    buf, got = device_buffer(xp, rank), None
    ex = mpi.Exchange(comm, buf)
    incoming = mpi.Exchange(comm, buf.like())
    got = incoming.buffer.data
    got += 5                                 # a kernel still reading/writing the landing buffer
    receive = incoming.irecv((rank - 1) % size)
    buf.data *= 3                            # queued before the send: MPI must see it
    send = ex.isend((rank + 1) % size)
    send.wait()
    receive.wait()
    assert settled(xp)
    prev = (rank - 1) % size
    np.testing.assert_array_equal(host_copy(got), 3 * (np.arange(11.0) + 100 * prev))


def test_a_part_moves_only_its_slice_and_keeps_the_discipline(comm, xp):
    """mpi.exchange_part (a server's shard): elements [3, 9) of the buffer,
    across a tensor boundary, through the slice of the whole's pinned mirror."""
    rank, size = comm.rank, comm.size
    buf = device_buffer(xp, rank)
    whole = mpi.Exchange(comm, buf)
    part = mpi.exchange_part(whole, 3, 9)
    assert part.direct == whole.direct and part.buffer.size == 6
    if buf.on_device and not whole.direct:
        assert np.shares_memory(part.buffer.host, buf.host)
    landing = buf.copy()
    landing.data += 1                        # a kernel still writing the landing buffer
    receive = mpi.exchange_part(mpi.Exchange(comm, landing), 3, 9).irecv((rank - 1) % size)
    buf.data *= 2                            # queued before the send: MPI must see it
    part.isend((rank + 1) % size).wait()
    receive.wait()
    assert settled(xp)
    prev = (rank - 1) % size
    expected = np.arange(11.0) + 100 * rank + 1
    expected[3:9] = 2 * (np.arange(3.0, 9.0) + 100 * prev)
    np.testing.assert_array_equal(host_copy(landing.data), expected)


def test_collectives_on_device_arrays(comm, xp):
    coll = Collectives(comm)
    rank, size = comm.rank, comm.size
    grid = xp.asarray(np.arange(12.0).reshape(3, 4) + rank)
    column = grid[:, 1]                      # not contiguous: staged back in place
    coll.allreduce_inplace(column, "grad")
    expected = size * np.arange(12.0).reshape(3, 4)[:, 1] + sum(range(size))
    np.testing.assert_array_equal(host_copy(grid[:, 1]), expected)
    np.testing.assert_array_equal(host_copy(grid[:, 0]), np.arange(0, 12, 4.0) + rank)
    flat = xp.asarray(np.full(5, rank, np.float32))
    flat *= 2                                # queued before the collective
    coll.allreduce_inplace(flat, "grad")
    np.testing.assert_array_equal(host_copy(flat), 2 * sum(range(size)))
    gathered = coll.allgather(flat[:2] + rank, "act", xp=xp)
    assert gathered.shape == (size, 2)
    np.testing.assert_array_equal(host_copy(gathered)[:, 0], 2 * sum(range(size)) + np.arange(size))
    summed = coll.allreduce(xp.asarray(np.ones(3)) * rank, "act", xp=xp)
    np.testing.assert_array_equal(host_copy(summed), sum(range(size)))


def test_collectives_allocate_only_their_results(comm, xp):
    """Staged or direct, a call allocates no host array and no device
    temporary once warm: the in-place sum none, the others their result."""
    simulated = getattr(xp, "device", None)
    if simulated is None:
        pytest.skip("counts the simulated device's allocations")
    coll = Collectives(comm)
    flat = xp.asarray(np.full(6, comm.rank, np.float32))
    for warm in (True, False):
        pinned, allocated = simulated.pinned_allocations(), simulated._state.allocated
        coll.allreduce_inplace(flat, "grad")
        summed = coll.allreduce(flat, "act", xp=xp)
        gathered = coll.allgather(flat[:2], "act", xp=xp)
        if not warm:
            assert simulated.pinned_allocations() == pinned
            assert simulated._state.allocated - allocated == 2
    total = sum(range(comm.size))
    np.testing.assert_array_equal(host_copy(flat), total * comm.size)
    np.testing.assert_array_equal(host_copy(summed), total * comm.size ** 2)
    np.testing.assert_array_equal(host_copy(gathered), total * comm.size)
