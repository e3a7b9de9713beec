"""Fit a least-squares problem with local SGD and every collective algorithm.

    mpirun -np 4 python examples/least_squares.py

Each rank holds its own share of the rows of (A, b), trains w with plain SGD
for a block of samples, and synchronizes through psgd. Rank 0 prints the
distance of the final model to the closed-form optimum of the whole problem.
"""
import sys

import numpy as np
from mpi4py import MPI

import psgd

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
rows, dim, lr, block = 4000, 20, 0.05, 32

rng = np.random.default_rng(0)           # every rank draws the same problem...
A = rng.standard_normal((rows, dim))
b = A @ rng.standard_normal(dim) + 0.1 * rng.standard_normal(rows)
optimum = np.linalg.lstsq(A, b, rcond=None)[0]
share = np.array_split(np.arange(rows), size)[rank]   # ...and trains on its share
A_k, b_k = A[share], b[share]

failed = False
for name in ("bsp", "bmuf", "sod", "syncgrad"):
    w = np.zeros(dim)
    if name == "syncgrad":
        sync = psgd.create(name, [w], grads=[np.zeros(dim)])
    else:
        sync = psgd.create(name, [w])
    w = sync.params[0]
    order = np.random.default_rng(rank).permutation(len(share))
    for epoch in range(10):
        for start in range(0, len(order), block):
            i = order[start:start + block]
            grad = A_k[i].T @ (A_k[i] @ w - b_k[i]) / len(i)
            if name == "syncgrad":
                sync.grads[0][...] = grad
                sync.synchronize(len(i))
                w -= lr * sync.grads[0]
            else:
                w -= lr * grad
                sync.synchronize(len(i))
    if name == "syncgrad":
        sync.stop(0, step=lambda: None)
    else:
        sync.stop(0)
    distance = np.linalg.norm(w - optimum) / np.linalg.norm(optimum)
    if rank == 0:
        print("%-8s %d ranks: relative distance to the optimum %.2e" % (name, size, distance))
    failed |= not distance < 0.05
sys.exit(1 if failed else 0)
