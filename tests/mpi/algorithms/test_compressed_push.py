"""asgd's and masgd's compressed push under mpirun against a serial replay
of the contract: u = delta + e_k, one Q(u) per server shard (its blocks
from the shard's first element), the server applies D(q). Workers take
turns in rank order, so the server's order of service is known."""
import numpy as np
import pytest

import psgd
from compression_replay import roundtrip
from psgd import kernels
from psgd.backend import to_numpy
from psgd.buffers import shard_bounds
from psgd.compression import quantizer
from psgd.errors import UsageError

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(120)]

SIZE, SYNCS, BLOCK = 1003, 4, 64


def initial():
    return [np.random.default_rng(5).standard_normal(SIZE).astype(np.float32)]


def step(k, t):
    return (np.random.default_rng(10 * k + t).standard_normal(SIZE) * 0.1).astype(np.float32)


def turns(comm, servers, name, xp=np, **options):
    """Run the workers one at a time, the models in `xp`'s arrays (a
    device's: tests/mpi/device); the final center (on rank 0) and each
    worker's model, gathered on every rank."""
    sync = psgd.create(name, [xp.asarray(a) for a in initial()], comm=comm, servers=servers,
                       **options)
    workers = comm.Split(int(comm.rank < servers), comm.rank)
    if comm.rank < servers:
        sync.run()
    else:
        for t in range(SYNCS):
            for k in range(servers, comm.size):
                if comm.rank == k:
                    sync.buffer.data[...] += xp.asarray(step(k, t))
                    sync.synchronize(10)
                workers.Barrier()
        sync.stop()
    workers.Free()
    everything = comm.allgather(to_numpy(sync.buffer.data, copy=True))
    sync.close()
    return everything


def replay(size, servers, kind, name):
    q = quantizer(kind, BLOCK)
    shards = shard_bounds(SIZE, servers)
    x = initial()[0].copy()
    w_prev = {k: x.copy() for k in range(servers, size)}
    w = {k: x.copy() for k in w_prev}
    e = {k: np.zeros(SIZE, np.float32) for k in w_prev}
    v = {k: np.zeros(SIZE, np.float32) for k in w_prev}
    for t in range(SYNCS):
        for k in w:
            w[k] = w[k] + step(k, t)
            e[k] += w[k] - w_prev[k]
            for lo, hi in shards:
                d = roundtrip(q, e[k][lo:hi])
                if name == "asgd":
                    kernels.axpy(x[lo:hi], 1.0, d)
                else:
                    kernels.momentum_step(x[lo:hi], v[k][lo:hi], d, 0.9, 0.1)
            w[k], w_prev[k] = x.copy(), x.copy()
    return x, w


@pytest.mark.parametrize("name", ["asgd", "masgd"])
@pytest.mark.parametrize("kind", ["fp16", "bf16", "1bit"])
def test_the_push_replays_the_contract(comm, name, kind):
    servers = 2 if comm.size >= 3 and kind == "1bit" else 1
    got = turns(comm, servers, name, compression=kind, compression_block=BLOCK)
    x, w = replay(comm.size, servers, kind, name)
    assert got[0].tobytes()[:4 * (SIZE // servers)] == x.tobytes()[:4 * (SIZE // servers)]
    for k, model in w.items():
        assert got[k].tobytes() == model.tobytes(), (name, kind, k)


def test_compression_start_pushes_go_plain(comm):
    plain = turns(comm, 1, "asgd")
    warm = turns(comm, 1, "asgd", compression="1bit", compression_start=SYNCS)
    assert [a.tobytes() for a in warm] == [a.tobytes() for a in plain]


def test_a_push_overflow_is_named_on_its_worker_before_it_is_sent(comm):
    sync = psgd.create("asgd", initial(), comm=comm, compression="fp16", compression_start=1)
    if comm.rank == 0:
        sync.run()
    else:
        sync.buffer.data[0] += 1e6
        sync.synchronize(1)             # plain: the first push
        sync.buffer.data[0] += 1e6
        if comm.rank == comm.size - 1:
            with pytest.raises(UsageError, match=r"worker %d's push at its sync 2 has a value "
                               r"beyond fp16" % comm.rank):
                sync.synchronize(1)
        sync.stop()
    sync.close()


def test_the_worker_residual_is_state_and_reset_to_zeroes_it(comm):
    sync = psgd.create("masgd", initial(), comm=comm, compression="1bit")
    if comm.rank == 0:
        sync.run()
    else:
        sync.buffer.data[...] += step(comm.rank, 0)
        sync.synchronize(1)
        sync.stop()
        assert np.abs(sync.state_dict()["residual_worker"]).max() > 0
    sync.reset_to(initial() if comm.rank == 0 else None)
    if comm.rank > 0:
        assert not sync.state_dict()["residual_worker"].any()
    sync.close()
