"""A worker that asks for READY (MSG_SYNC_WHEN_READY: sharded servers'
workers in turns, docs/protocol.md) pushes only once the server has sent
it; a plain SYNC, the contract's, is served as before and gets no READY.
Rank 1 speaks the wire protocol with bare MPI calls here; the other workers
stop at once."""
import numpy as np
import pytest
from mpi4py import MPI

import psgd
from psgd import protocol

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(60)]

SIZE = 40


@pytest.mark.parametrize("message", [protocol.MSG_SYNC, protocol.MSG_SYNC_WHEN_READY])
def test_a_push_waits_for_ready_only_when_asked(comm, message):
    obj = psgd.create("asgd", [np.zeros(SIZE)], comm=comm)
    if obj.role == "server":
        stats = obj.run()
        assert stats.syncs == 1 and [e.rank for e in obj.log] == [1]
        obj.close()
        return
    if comm.rank == 1:
        wire = obj.comm                 # the communicator psgd's messages travel on
        delta = np.arange(1.0, SIZE + 1)
        wire.Send([np.array([message, 3], dtype=np.int64), MPI.INT64_T], dest=0,
                  tag=protocol.TAG_MSG)
        ready = np.zeros(1, dtype=np.uint8)
        if message == protocol.MSG_SYNC_WHEN_READY:
            wire.Recv([ready, MPI.BYTE], source=0, tag=protocol.TAG_READY)
        wire.Send([delta, MPI.DOUBLE], dest=0, tag=protocol.TAG_MODEL)
        x = np.empty(SIZE)
        wire.Recv([x, MPI.DOUBLE], source=0, tag=protocol.TAG_MODEL)
        np.testing.assert_array_equal(x, delta)             # x <- 0 + 1.0 * delta_k
        assert not wire.Iprobe(source=0, tag=protocol.TAG_READY)   # one READY, if asked
    obj.stop()
    obj.close()
