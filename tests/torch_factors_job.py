"""A psgd.torch syncgrad job across hosts (tests/cluster): the same steps
with the factors as create() chooses them there (unset) and with every
layer summed plainly; rank 0 prints one line with what the factors did."""
import numpy as np
import torch
from mpi4py import MPI

import psgd.torch

FAN_IN, HIDDEN, OUT, STEPS = 512, 1024, 4, 6    # the hidden layer spares 2 MB a step


def train(comm, **options):
    torch.manual_seed(comm.rank)
    m = torch.nn.Sequential(torch.nn.Linear(FAN_IN, HIDDEN), torch.nn.ReLU(),
                            torch.nn.Dropout(0.2), torch.nn.Linear(HIDDEN, OUT))
    sync = psgd.torch.create("syncgrad", m, comm=comm, **options)
    opt = psgd.torch.DistributedOptimizer(torch.optim.Adam(m.parameters(), lr=1e-3), sync)
    for t in range(STEPS):
        g = torch.Generator().manual_seed(100 * comm.rank + t)
        torch.manual_seed(1000 * comm.rank + t)         # dropout's masks, alike in both runs
        rows = 8 - (comm.rank + t) % 3
        x, y = torch.randn(rows, FAN_IN, generator=g), torch.randint(OUT, (rows,), generator=g)
        opt.zero_grad()
        opt.samples = rows
        torch.nn.functional.cross_entropy(m(x), y).backward()
        opt.step()
    opt.stop()
    got = np.concatenate([p.detach().numpy().ravel() for p in m.parameters()])
    everyone = np.empty((comm.size, got.size), dtype=got.dtype)
    comm.Allgather(got, everyone)
    products = ",".join(str(b.products) for b in sync.buckets.factor_buckets)
    return got, bool((everyone == everyone[0]).all()), products


def main():
    comm = MPI.COMM_WORLD
    torch.set_num_threads(1)
    chosen, identical, products = train(comm)
    plain, _, none = train(comm, factors=False)
    if comm.rank == 0:
        print("FACTORS products=[%s] plain=[%s] identical=%s maxdiff=%.3g" % (
            products, none, identical, float(np.abs(chosen - plain).max())), flush=True)


if __name__ == "__main__":
    main()
