"""The NCCL exchange (psgd/nccl.py) on the simulated device's NCCL: chosen
by auto when every rank has a GPU and NCCL, forced or refused by
exchange=, and the collective replays hold with the sums queued on the
current stream (the simulated NCCL reads only what that stream did)."""
import numpy as np
import pytest

import psgd
from device_util import load
from psgd import nccl
from psgd.errors import UsageError

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(120)]

collective = load("algorithms/test_collective.py")
pipelines = load("algorithms/test_pipeline.py")


@pytest.fixture
def sim():
    """The simulated device with NCCL and a host-only MPI: a device pointer
    reaching MPI fails, so every sum must go through NCCL."""
    import simcupy
    previous = simcupy.install(nccl=True)
    yield simcupy
    simcupy.cuda.Device().synchronize()
    simcupy.uninstall(previous)
    nccl.configure()                  # a trainer's --exchange stays for the process


@pytest.mark.parametrize("name", ["bsp", "bmuf", "sod"])
def test_auto_takes_nccl_and_the_replays_hold(comm, sim, name):
    update, final_of, options = pipelines.REPLAYS[name]
    sync = collective.check(comm, name, update, final_of, xp=sim, **options)
    assert isinstance(sync.exchange, nccl.NcclExchange) and sync.exchange.nccl.calls > 3
    assert "NCCL 2.18.5" in nccl.describe()


def test_syncgrad_sums_gradients_through_nccl(comm, sim):
    sync = psgd.create("syncgrad", [sim.zeros(4)], grads=[sim.zeros(4)], comm=comm)
    assert isinstance(sync.grad_exchange, nccl.NcclExchange)
    w, g = sync.params[0], sync.grads[0]
    g[...] = comm.rank + 1.0                # queued: NCCL must read it in stream order
    assert sync.synchronize(1)
    np.testing.assert_allclose(w.get(), 0.0)
    np.testing.assert_allclose(g.get(), sum(range(1, comm.size + 1)) / comm.size)
    sync.stop(0)
    sync.close()
    assert sync.nccl is None


def test_the_sum_runs_on_the_current_stream(comm, sim):
    """Work queued on another stream and not waited for is not in the sum."""
    sync = psgd.create("bsp", [sim.zeros(3)], comm=comm)
    w = sync.params[0]
    side = sim.cuda.Stream()
    with side:
        w += 1.0                             # the user's side stream: psgd cannot see it
        sync.synchronize(1)                  # ... unless it runs there, in order
    side.synchronize()
    np.testing.assert_allclose(w.get(), 1.0)
    sync.stop(0)


def test_exchange_mpi_keeps_mpi(comm, sim):
    sim.set_mpi(cuda_aware=False)
    sync = psgd.create("bmuf", [sim.zeros(5)], comm=comm, exchange="mpi")
    assert not isinstance(sync.exchange, nccl.NcclExchange) and not sync.exchange.direct
    assert nccl.describe() is None
    sync.stop(0)


def test_exchange_nccl_is_refused_where_it_cannot_work(comm, sim):
    with pytest.raises(UsageError, match=r"exchange nccl: easgd is a server algorithm"):
        psgd.create("easgd", [sim.zeros(3)], comm=comm, exchange="nccl")
    on_host = comm.rank == comm.size - 1     # one rank keeps its model on the host
    params = [np.zeros(3)] if on_host else [sim.zeros(3)]
    with pytest.raises(UsageError, match=r"NCCL cannot serve this job: rank %d \(host .*\) "
                                         r"keep the model on the host" % (comm.size - 1)):
        psgd.create("bsp", params, comm=comm, exchange="nccl")
    sync = psgd.create("bsp", params, comm=comm)          # auto: MPI then
    assert not isinstance(sync.exchange, nccl.NcclExchange)
    sync.stop(0)
    with pytest.raises(UsageError, match="exchange must be auto, mpi or nccl"):
        psgd.create("bsp", [sim.zeros(3)], comm=comm, exchange="gloo")


def test_without_nccl_auto_uses_mpi_and_nccl_names_the_ranks(comm, sim):
    sim.install(nccl=False)
    sim.set_mpi(cuda_aware=False)
    with pytest.raises(UsageError, match=r"ranks? .* cannot load NCCL"):
        psgd.create("bsp", [sim.zeros(3)], comm=comm, exchange="nccl")
    sync = psgd.create("bsp", [sim.zeros(3)], comm=comm)
    assert not isinstance(sync.exchange, nccl.NcclExchange)
    sync.stop(0)


def test_ranks_that_disagree_on_the_exchange_are_told(comm, sim):
    """NCCL on some ranks and MPI on others would hang in the first sum."""
    kind = "nccl" if comm.rank == 0 else "mpi"
    with pytest.raises(UsageError, match="exchange"):
        psgd.create("bsp", [sim.zeros(3)], comm=comm, exchange=kind)


def test_training_takes_nccl_and_says_so(comm, sim, capsys):
    import psgd.train
    small = dict(model="mlp", hidden="16", num_samples=400, epochs=1, stall_timeout=120.0)
    on_device = psgd.train.train(comm=comm, algo="bmuf", backend="cupy", quiet=False,
                                 exchange="nccl", **small)
    logged = [l for l in capsys.readouterr().out.splitlines() if "exchange:" in l]
    on_host = psgd.train.train(comm=comm, algo="bmuf", backend="numpy", quiet=True, **small)
    assert on_device["train_loss"] == pytest.approx(on_host["train_loss"], rel=1e-5)
    if comm.rank == 0:
        assert len(logged) == 1 and "exchange: NCCL 2.18.5" in logged[0], logged
    with pytest.raises(UsageError, match="keep the model on the host"):
        psgd.train.train(comm=comm, algo="bsp", backend="numpy", quiet=True, exchange="nccl",
                         **small)



def test_ranks_that_share_a_gpu_sum_through_mpi(comm, sim):
    """More ranks than GPUs: NCCL refuses a communicator with two ranks on
    one GPU (on every rank), so auto takes MPI and nccl names the ranks."""
    sim.share_gpus()
    sim.set_mpi(cuda_aware=False)
    sim.cuda.Device(comm.rank % 2).use()                 # 2 GPUs, ranks by local rank
    sharing = [r for r in range(comm.size) if comm.size > 2 and r % 2 == 0 or comm.size > 3]
    sync = psgd.create("bsp", [sim.zeros(3)], comm=comm)
    assert isinstance(sync.exchange, nccl.NcclExchange) == (not sharing)
    sync.params[0][...] = comm.rank + 1.0
    sync.synchronize(1)
    np.testing.assert_allclose(sync.params[0].get(), (comm.size + 1) / 2.0)
    sync.stop(0)
    if sharing:
        with pytest.raises(UsageError, match=r"NCCL needs a GPU of its own for each rank, and "
                                             r"ranks %s \(host .*\) share one" %
                                             ", ".join(map(str, sharing))):
            psgd.create("bsp", [sim.zeros(3)], comm=comm, exchange="nccl")


def test_reset_to_broadcasts_through_nccl(comm, sim):
    sync = psgd.create("bmuf", [sim.zeros(4)], comm=comm)
    assert isinstance(sync.exchange, nccl.NcclExchange)
    mine = sim.full(4, comm.rank + 5.0)             # queued: the broadcast reads it in order
    sync.reset_to([mine] if comm.rank == 0 else None)
    np.testing.assert_array_equal(sync.params[0].get(), 5.0)
    sync.stop(0)


def test_a_unique_id_that_cannot_be_made_leaves_no_rank_waiting(comm, sim, monkeypatch):
    def broken():
        raise RuntimeError("NCCL_ERROR_SYSTEM_ERROR: no socket interface found")
    if comm.rank == 0:
        monkeypatch.setattr(sim.nccl, "get_unique_id", broken)      # cupy.cuda.nccl
    sync = psgd.create("bsp", [sim.zeros(3)], comm=comm)          # auto: MPI then
    assert not isinstance(sync.exchange, nccl.NcclExchange)
    sync.stop(0)
    with pytest.raises(UsageError, match=r"rank 0 could not make an NCCL unique id "
                                         r"\(ncclGetUniqueId failed: RuntimeError: "
                                         r"NCCL_ERROR_SYSTEM_ERROR: no socket interface found\)"):
        psgd.create("bsp", [sim.zeros(3)], comm=comm, exchange="nccl")
