"""Compressed sums of device buffers (psgd/compression/device.py): bsp,
bmuf, sod and syncgrad with the model on the simulated device, staged and
direct (and on a GPU, where one is lent), against the host path on the same
schedule, which tests/mpi/algorithms/test_compression.py replays against
the contract: every rank decodes the same bytes, and every sync leaves the
host path's model. The same for asgd's and masgd's compressed push
(test_compressed_push.py replays the host path). The simulated device
runs a copy only when its stream is synchronized, so a missing
synchronization around the staging breaks these. Then the residuals as state: a checkpoint from the device resumes,
and reset_to zeroes them."""
import numpy as np
import pytest

import psgd
from compression_schedule import (KINDS, OPTIONS, SHAPES, agree_bitwise, counts, drive,
                                  initial, step)
from device_util import load
from psgd.backend import to_numpy

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(120)]


def same_as_host(got, host, xp):
    """Bit for bit on the simulated device (its kernels are NumPy's
    operations). A GPU's kernels may contract a multiply and an add, and
    1bit turns a last-bit difference near 0 into a sign: there, all but
    1% of the elements within 1e-3."""
    assert len(got) == len(host)
    for t, (a, b) in enumerate(zip(got, host)):
        if xp.__name__ == "simcupy":
            assert a.tobytes() == b.tobytes(), (t, np.abs(a - b).max())
        else:
            assert np.mean(np.abs(a - b) > 1e-3) < 0.01, (t, np.abs(a - b).max())


@pytest.mark.parametrize("name", ["bsp", "bmuf", "sod"])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("momentum", ["global", "local"])
def test_collective_algorithms_sum_device_buffers_as_the_host(comm, xp, name, kind, momentum):
    options = dict(OPTIONS[name], compression=kind, compression_block=64)
    if name != "bsp":
        options["compression_momentum"] = momentum
    elif momentum == "local":
        pytest.skip("bsp has no momentum to share")
    host, host_seen = drive(comm, name, xp=np, **options)
    device, seen = drive(comm, name, xp=xp, **options)
    assert device.buffer.on_device
    agree_bitwise(comm, seen)
    same_as_host(seen, host_seen, xp)
    for obj in (host, device):
        obj.close()


@pytest.mark.parametrize("kind", KINDS)
def test_syncgrad_sums_device_gradients_as_the_host(comm, xp, kind):
    k, models = comm.Get_rank(), []
    for mod in (np, xp):
        grads = [mod.zeros(s, np.float32) for s in SHAPES]
        sync = psgd.create("syncgrad", [mod.asarray(a) for a in initial()], comm=comm,
                           grads=grads, compression=kind, compression_block=50)
        g, seen, plan = sync.grad_buffer.data, [], counts(k, comm.Get_size())
        for t in range(5):
            n_k = plan[t] if t < len(plan) else 0
            g[...] = mod.asarray(step(k, t) * 100) if n_k else np.nan    # out of data: ignored
            assert sync.synchronize(n_k)
            seen.append(to_numpy(g, copy=True))
        sync.stop(0)
        sync.close()
        models.append(seen)
    agree_bitwise(comm, models[1])
    same_as_host(models[1], models[0], xp)


def test_a_device_checkpoint_resumes_and_reset_to_zeroes_the_residuals(comm, xp):
    options = dict(compression="1bit", compression_block=32)
    whole, seen = drive(comm, "bmuf", xp=xp, syncs=4, **options)
    first, _ = drive(comm, "bmuf", xp=xp, syncs=2, **options)
    state = first.state_dict()
    residual = {key: v for key, v in state.items() if key.startswith("residual")}
    assert sorted(residual) == ["residual_owner", "residual_worker"]
    assert all(isinstance(v, np.ndarray) for v in residual.values())   # a checkpoint's arrays
    assert residual["residual_worker"].any()
    again = psgd.create("bmuf", [xp.asarray(to_numpy(v)) for v in first.params], comm=comm,
                        **options)
    again.load_state_dict(state)
    k, plan = comm.Get_rank(), counts(comm.Get_rank(), comm.Get_size())
    for t in (2, 3):
        n_k = plan[t] if t < len(plan) else 0
        if n_k:
            again.buffer.data[...] += xp.asarray(step(k, t))
        again.synchronize(n_k)
    assert to_numpy(again.buffer.data).tobytes() == seen[3].tobytes()
    again.reset_to([xp.asarray(a) for a in initial()] if k == 0 else None)
    assert not any(v.any() for key, v in again.state_dict().items() if key.startswith("residual"))
    for obj in (whole, first, again):
        obj.close()


@pytest.fixture(params=["on", "leader"])
def host_pairs(monkeypatch, request):
    """Hosts faked as rank pairs ({0, 1}, {2, 3}, ...), two levels forced:
    sliced where the hosts are even (np 2), else and with `leader` through
    one leader per host (tests/mpi/algorithms/test_compression_hosts.py
    replays them)."""
    from psgd import hierarchy, settings
    real = hierarchy.create
    monkeypatch.setattr(hierarchy, "create", lambda comm, host=None: real(
        comm, comm.Get_rank() // 2))
    old = settings.set("PSGD_COMPRESSION_HIERARCHY", request.param)
    yield
    settings.set("PSGD_COMPRESSION_HIERARCHY", old)


def _held(sync):
    """The part of e_k this rank holds after a sum: its slice (sliced), all
    of it (a leader), or none."""
    from psgd.algorithms import two_level
    inner = sync.compressed.striped.inner
    if isinstance(inner, two_level.SlicedSum):
        return inner.mine
    return (0, inner.feedback.worker.size) if inner.levels.is_leader else (0, 0)


@pytest.mark.parametrize("name", ["bmuf", "syncgrad"])
def test_the_two_level_sum_of_device_buffers_is_the_hosts(comm, xp, host_pairs, name):
    """What a rank sends for its host goes to the rank that sums it and is
    0 after the sum: on a device too, every sync."""
    if name == "syncgrad":
        test_syncgrad_sums_device_gradients_as_the_host(comm, xp, "1bit")
        return
    host, host_seen = drive(comm, name, xp=np, compression="1bit", compression_block=64)
    device, seen = drive(comm, name, xp=xp, compression="1bit", compression_block=64)
    agree_bitwise(comm, seen)
    same_as_host(seen, host_seen, xp)
    lo, hi = _held(device)
    e = to_numpy(device.compressed.residual)
    assert not e[:lo].any() and not e[hi:].any()
    for obj in (host, device):
        obj.close()


push = load("algorithms/test_compressed_push.py")


@pytest.mark.parametrize("name", ["asgd", "masgd"])
@pytest.mark.parametrize("kind", KINDS)
def test_the_push_from_a_device_is_the_hosts(comm, xp, name, kind):
    """The worker's delta comes to the host to be encoded, the server
    decodes into its shard's mirror: the host path's centers and models."""
    servers = 2 if comm.size >= 3 and kind == "1bit" else 1
    options = dict(compression=kind, compression_block=push.BLOCK)
    host = push.turns(comm, servers, name, **options)
    device = push.turns(comm, servers, name, xp=xp, **options)
    same_as_host(device, host, xp)
