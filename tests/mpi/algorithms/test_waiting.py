"""The server algorithms' waits under mpirun (psgd/algorithms/waiting.py):
an idle server and a worker waiting on a slow server sleep instead of
spinning, and a failure notice still ends a worker's wait. CPU bounds are
generous (a spinning rank uses a core: ~100%, or ~50% where ranks outnumber
the cores); the waits here cost a few percent."""
import time

import numpy as np
import pytest
from mpi4py import MPI

import psgd
from psgd import mpi
from psgd.errors import ProtocolError

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(60)]

CPU_BOUND = 0.2     # CPU time / wall time of a wait that does not spin


def _finish(comm, obj):
    obj.close()
    assert comm.allreduce(1) == comm.size


def test_an_idle_server_sleeps_through_a_long_wait(comm):
    obj = psgd.create("easgd", [np.zeros(1000)], comm=comm)
    if obj.role == "server":
        stats = obj.run()
    else:
        time.sleep(1.0)                     # 'compute'
        obj.synchronize(1)
        obj.stop(0)
    _finish(comm, obj)
    if obj.role == "server":
        assert stats.syncs == comm.size - 1
        assert stats.idle_s >= 0.8
        assert stats.idle_cpu_s < CPU_BOUND * stats.idle_s, stats
        assert stats.cpu_s < CPU_BOUND * stats.wall_s, stats
        assert stats.sleeps > 0


@pytest.mark.parametrize("name", ["easgd", "asgd"])
def test_a_worker_waiting_on_a_slow_server_does_not_burn_its_cpu(comm, name):
    obj = psgd.create(name, [np.zeros(1000)], comm=comm)
    if obj.role == "server":
        time.sleep(1.0)                     # busy elsewhere before it serves
        obj.run()
    else:
        wall, cpu = time.perf_counter(), time.process_time()
        obj.synchronize(1)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        obj.stop(0)
    _finish(comm, obj)                      # then check: a failure here hangs no one
    if obj.role != "server":
        assert wall >= 0.8
        assert cpu < CPU_BOUND * wall, (cpu, wall)


@pytest.mark.mpi(min_size=3)
def test_a_notice_ends_a_held_workers_wait_without_spinning(comm):
    """asgd with barrier_period 1 holds every reply until all running workers
    wait; the last rank never syncs but sends a bad control message after
    a second, so the others sit in their wait until the notice ends it."""
    bad = comm.size - 1
    obj = psgd.create("asgd", [np.zeros(1000)], comm=comm, barrier_period=1)
    if obj.role == "server":
        with pytest.raises(ProtocolError, match="unknown control message 7"):
            obj.run()
    elif comm.rank == bad:
        time.sleep(1.0)
        obj.comm.Send([np.array([7, 0], dtype=np.int64), MPI.INT64_T], dest=mpi.MAIN_RANK,
                      tag=mpi.TAG_MSG)
        with pytest.raises(ProtocolError):
            obj.stop(0)
    else:
        wall, cpu = time.perf_counter(), time.process_time()
        with pytest.raises(ProtocolError, match="unknown control message 7 from rank %d"
                           % bad):
            obj.synchronize(1)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert comm.allreduce(1) == comm.size
    if 0 < comm.rank < bad:
        assert 0.8 <= wall < 30
        assert cpu < CPU_BOUND * wall, (cpu, wall)
