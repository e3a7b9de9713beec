"""The training schedule the compressed-sum tests drive under mpirun and
replay serially: uneven sample counts per rank, rank 1 out of data early."""
import numpy as np

import psgd

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


def drive(comm, name, syncs=None, **options):
    """Train with the schedule; the flat model after every sync."""
    k = comm.Get_rank()
    sync = psgd.create(name, initial(), comm=comm, **options)
    plan, seen = counts(k, comm.Get_size()), []
    t = 0
    while syncs is None or t < syncs:
        n_k = plan[t] if t < len(plan) else 0
        if n_k:
            sync.buffer.data[...] += step(k, t)
        if not sync.synchronize(n_k):
            break
        seen.append(sync.buffer.data.copy())
        t += 1
    return sync, seen


OPTIONS = {"bsp": {}, "bmuf": {}, "sod": {"outer": "sgd", "outer_lr": OUTER_LR}}


def residuals(sync):
    return {k: v for k, v in sync.state_dict().items() if k.startswith("residual")}
