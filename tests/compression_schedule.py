"""The training schedule the compressed-sum tests drive under mpirun and
replay serially: uneven sample counts per rank, rank 1 out of data early."""
import numpy as np

import psgd
from psgd import kernels
from psgd.backend import to_numpy

KINDS = ["fp16", "bf16", "1bit"]
SHAPES = [(37, 11), (101,), (3, 5)]
SIZE = sum(int(np.prod(s)) for s in SHAPES)
OUTER_LR = 0.6


def counts(k, size):
    """Samples of rank k per block: uneven, rank 1 out of data early."""
    blocks = 2 if k == 1 and size > 2 else 5
    return [(5 * k + 3 * t) % 7 + 1 for t in range(blocks)]


def step(k, t):
    return (np.random.default_rng(100 * k + t).standard_normal(SIZE) * 0.1).astype(np.float32)


def initial():
    return [np.random.default_rng(7).standard_normal(s).astype(np.float32) for s in SHAPES]


def replay_syncs(size):
    """The serial side of drive(): per sync, (ns, ws) with every rank's count
    and its model after its local steps; the replay sets ws[:] to the model
    the sync leaves before asking for the next."""
    flat = np.concatenate([a.ravel() for a in initial()])
    ws = [flat.copy() for _ in range(size)]
    plans = [counts(k, size) for k in range(size)]
    t = 0
    while True:
        ns = [p[t] if t < len(p) else 0 for p in plans]
        if not sum(ns):
            return
        for k in range(size):
            if ns[k]:
                ws[k] = ws[k] + step(k, t)
        yield ns, ws
        t += 1


def agree_bitwise(comm, seen):
    everyone = comm.allgather(b"".join(w.tobytes() for w in seen))
    assert len(set(everyone)) == 1


def drive(comm, name, syncs=None, xp=np, **options):
    """Train with the schedule, the model in `xp`'s arrays (a device's:
    tests/mpi/device); the flat model after every sync, on the host."""
    k = comm.Get_rank()
    sync = psgd.create(name, [xp.asarray(a) for a in initial()], comm=comm, **options)
    plan, seen = counts(k, comm.Get_size()), []
    t = 0
    while syncs is None or t < syncs:
        n_k = plan[t] if t < len(plan) else 0
        if n_k:
            sync.buffer.data[...] += xp.asarray(step(k, t))
        if not sync.synchronize(n_k):
            break
        seen.append(to_numpy(sync.buffer.data, copy=True))
        t += 1
    return sync, seen


def replay_syncgrad(comm, kind, replay):
    """syncgrad with `kind` on the schedule's gradients (x100), rank 1 out of
    data early: after every sync each rank's averaged gradient is, bit for
    bit, `replay`'s sum of the counted ranks' gradients over their total
    count (wrong on any rank the count travelling in the sum missed)."""
    size, k = comm.Get_size(), comm.Get_rank()
    grads = [np.zeros(s, np.float32) for s in SHAPES]
    sync = psgd.create("syncgrad", initial(), comm=comm, grads=grads, compression=kind,
                       compression_block=50)
    assert sync.compressed_size() == SIZE      # the gradients, not the count's tail
    plans = [counts(j, size) for j in range(size)]
    flat = sync.grad_buffer.data
    for t in range(5):
        bs = [p[t] if t < len(p) else 0 for p in plans]
        flat[...] = step(k, t) * 100 if bs[k] else np.nan    # out of data: ignored
        assert sync.synchronize(bs[k])
        for j in range(size):
            if bs[j]:
                kernels.axpy(replay.e[j], bs[j], step(j, t) * 100)
        G = replay.sum()
        G /= np.float32(max(sum(bs), 1))
        same = flat.tobytes() == G.tobytes()
        assert comm.allgather(same) == [True] * size, (kind, t)
    sync.stop(0)
    sync.close()


OPTIONS = {"bsp": {}, "bmuf": {}, "sod": {"outer": "sgd", "outer_lr": OUTER_LR}}


def residuals(sync):
    return {k: v for k, v in sync.state_dict().items() if k.startswith("residual")}


def checkpoint_round_trip(comm, name, options, holds):
    """4 syncs straight against 2, a resume from their checkpoint and 2
    more: the same model. `holds`: whether this rank's checkpoint has a
    residual that is not 0. Then reset_to zeroes the residuals."""
    whole, seen = drive(comm, name, syncs=4, **options)
    first, _ = drive(comm, name, syncs=2, **options)
    state, model = first.state_dict(), [v.copy() for v in first.params]
    assert any(v.any() for v in residuals(first).values()) == holds
    again = psgd.create(name, model, comm=comm, **options)
    again.load_state_dict(state)
    k = comm.Get_rank()
    plan = counts(k, comm.Get_size())
    for t in (2, 3):
        n_k = plan[t] if t < len(plan) else 0
        if n_k:
            again.buffer.data[...] += step(k, t)
        again.synchronize(n_k)
    assert again.buffer.data.tobytes() == seen[3].tobytes()
    again.reset_to(initial() if comm.Get_rank() == 0 else None)
    assert all(not v.any() for v in residuals(again).values())
    assert sorted(residuals(again)) == ["residual_owner", "residual_worker"]
    for obj in (whole, first, again):
        obj.close()
