"""Every algorithm's replay test with the model on a device (simulated, or a
GPU): the device copies and kernels run only when a stream is synchronized,
so a missing synchronization on the sync path breaks a replay."""
import numpy as np
import pytest
from mpi4py import MPI

import reference
from device_util import load
from psgd import settings

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(120)]

collective = load("algorithms/test_collective.py")
servers = load("algorithms/test_servers.py")
in_flight = load("algorithms/test_in_flight.py")
average = load("algorithms/test_center_average.py")
overlap = load("algorithms/test_overlap.py")


@pytest.mark.parametrize("name,update,final_of,options", [
    ("bsp", lambda ws, ns, s: reference.bsp(ws, ns, s, False), None, {}),
    ("bmuf", lambda ws, ns, s: reference.bmuf(ws, ns, s, 0.6, 1.3, True),
     lambda s: s["w_g"], {"block_momentum": 0.6, "block_lr": 1.3}),
    ("sod", lambda ws, ns, s: reference.sod(ws, ns, s, "adam", 0.05), None,
     {"outer": "adam", "outer_lr": 0.05}),
], ids=["bsp", "bmuf", "sod"])
def test_collective_replay_on_device(comm, xp, name, update, final_of, options):
    sync = collective.check(comm, name, update, final_of, xp=xp, **options)
    assert sync.buffer.on_device


def test_syncgrad_on_device(comm, xp):
    w = xp.zeros(4)
    sync = collective.psgd.create("syncgrad", [w], grads=[xp.zeros(4)], comm=comm)
    w, g = sync.params[0], sync.grads[0]
    for t in range(3):
        g[...] = comm.rank + t
        assert sync.synchronize(1 + comm.rank)
        w -= 0.5 * g
    sync.stop(0)
    n = sum(1 + k for k in range(comm.size))
    expected = -0.5 * sum(sum((k + t) * (1 + k) for k in range(comm.size)) / n for t in range(3))
    np.testing.assert_allclose(w.get(), expected)


def test_chunked_bmuf_on_device(comm, xp):
    old = settings.set("PSGD_MPI_CHUNK", 4)
    try:
        collective.check(comm, "bmuf", lambda ws, ns, s: reference.bmuf(ws, ns, s, 0.5, 1.0, True),
                         lambda s: s["w_g"], xp=xp, block_momentum=0.5)
    finally:
        settings.set("PSGD_MPI_CHUNK", old)


@pytest.mark.parametrize("name", ["easgd", "asgd", "masgd"])
def test_server_replay_on_device(comm, xp, name):
    replay = {"easgd": lambda x, log, f: reference.easgd(x, log, f, 0.5),
              "asgd": lambda x, log, f: reference.asgd(x, log, f, 1.0),
              "masgd": lambda x, log, f: reference.asgd(x, log, f, 0.1, 0.9, "worker")}[name]
    options = {"alpha": 0.5} if name == "easgd" else {}
    obj, _, _ = servers.check_replay(comm, name, replay, xp=xp, **options)
    assert obj.buffer.on_device


def test_easgd_in_the_background_on_device(comm, xp):
    """A slow worker's sync served in the background (in_flight.py): the
    copy of x it is sent and the update on arrival are device work too."""
    if comm.size < 3:
        pytest.skip("needs two workers: one slow, one to compare it with")
    assert in_flight.check(comm, xp=xp).buffer.on_device


def test_easgd_exchanges_in_flight_on_device(comm, xp):
    """overlap: the snapshot sent, the center received and the late pull are
    device work on the caller's thread; the transfer thread only waits."""
    assert overlap.check(comm, xp=xp).buffer.on_device


@pytest.mark.parametrize("name", ["asgd", "masgd"])
def test_held_replies_on_device(comm, xp, name):
    """barrier_period: the server holds replies, so serve() goes straight
    from one worker's update kernel to the next receive."""
    servers.check_barrier(comm, name, {}, 1, xp=xp)


class ProgressCounted(MPI.Request):
    tests = 0            # Tests of a sum in flight (MPI progress), over all requests

    def Test(self, status=None):
        ProgressCounted.tests += 1
        return super().Test(status)


class HostOnlyIallreduce(MPI.Intracomm):
    """A communicator whose non-blocking reductions take host memory only,
    as a CUDA-aware Open MPI's do (UCX included), and count the progress
    the pipeline makes while they are in flight."""

    def Iallreduce(self, sendbuf, recvbuf, op=MPI.SUM):
        for buf in (sendbuf, recvbuf):
            if buf is not MPI.IN_PLACE and not isinstance(buf, np.ndarray):
                raise AssertionError("device memory handed to MPI_Iallreduce (%s)"
                                     % type(buf).__name__)
        return ProgressCounted(super().Iallreduce(sendbuf, recvbuf, op))


@pytest.mark.parametrize("name", ["bsp", "bmuf", "sod"])
def test_pipelined_replay_on_device(comm, xp, name):
    """Chunk by chunk through the pinned mirror, each chunk staged out
    before MPI gets it and staged in before the update's kernel reads it;
    with CUDA-aware MPI one blocking call, no device memory in Iallreduce."""
    pipeline = load("algorithms/test_pipeline.py")
    update, final_of, options = pipeline.REPLAYS[name]
    ProgressCounted.tests = 0
    with pipeline.Pipelined(4) as pipe:
        sync = collective.check(HostOnlyIallreduce(comm), name, update, final_of, xp=xp,
                                **options)
    assert sync.buffer.on_device
    assert (pipe.calls > 0) == (not sync.exchange.direct)
    if pipe.calls and getattr(xp, "device", None):
        # the simulated device copies one operation per query: MPI progressed
        # while a chunk was staged out under the sum of the one before
        assert ProgressCounted.tests > 0, "no MPI progress while the device copied"


@pytest.mark.parametrize("name", ["easgd", "masgd"])
def test_sharded_server_replay_on_device(comm, xp, name):
    """servers = size - 1: each shard goes through its slice of the pinned
    mirror (staged) or the device buffer (direct), and rank 0 gathers them."""
    if comm.size < 3:
        pytest.skip("two servers need three ranks")
    from shard_plans import check_sharded_replay
    replay = {"easgd": lambda x, log, f: reference.easgd(x, log, f, 0.5),
              "masgd": lambda x, log, f: reference.asgd(x, log, f, 0.1, 0.9, "worker")}[name]
    options = {"alpha": 0.5} if name == "easgd" else {}
    obj, _ = check_sharded_replay(comm, name, replay, comm.size - 1, xp=xp, **options)
    assert obj.buffer.on_device


def test_center_average_on_device(comm, xp):
    """The average folded by a device kernel, then gathered from every
    shard through the pinned mirror (staged) or the device buffer."""
    obj = average.check_average(comm, max(1, comm.size - 1), xp=xp)
    assert obj.buffer.on_device and (obj.role != "server" or obj.model_buffer.on_device)
    obj.close()


@pytest.mark.parametrize("name", ["asgd", "masgd"])
def test_server_replay_in_pieces_on_device(comm, xp, name):
    """Messages of 5 elements: each piece staged in before the server's
    update kernel reads it, and each piece of the center finished (direct)
    or staged out (staged) before MPI sends it."""
    pieces = load("algorithms/test_pieces.py")
    with pieces.Pieces(5) as p:
        obj, log, _ = servers.check_replay(comm, name, pieces.REPLAYS[name], xp=xp,
                                           **pieces.OPTIONS[name])
    assert obj.buffer.on_device and (obj.role != "server" or p.received == 5 * len(log))


@pytest.mark.parametrize("outer", ["sgd", "momentum", "nesterov", "adam"])
def test_a_sod_sync_allocates_no_device_memory(comm, xp, outer):
    """The outer step works in place: a model-sized temporary per sync on
    the device is memory (and an allocator call) the sync does not need."""
    simulated = getattr(xp, "device", None)
    sync = collective.psgd.create("sod", [xp.zeros(64), xp.zeros((4, 4))], comm=comm,
                                  outer=outer, outer_lr=0.1)
    for t in range(3):
        if t == 2 and simulated is not None:
            before = simulated._state.allocated
        for p in sync.params:
            p += comm.rank + t
        sync.synchronize(1)
    if simulated is not None:
        assert simulated._state.allocated == before, "device arrays allocated in one sync"
    sync.stop(0)
