"""A PyTorch MNIST-1D CNN trained with any psgd algorithm: three psgd lines
(marked) in an ordinary torch training loop, as with Horovod or DDP.

    .venv/bin/mpirun -np 4 .venv/bin/python examples/torch_mnist1d.py --algo bmuf
    .venv/bin/mpirun -np 4 .venv/bin/python examples/torch_mnist1d.py --algo syncgrad \
        --compression 1bit --compression-start 100      # for slow links

The model and defaults are `python -m psgd.worker`'s (CNN 32,32,32 + FC 256,
Adam 2e-3, minibatch 32, 30 epochs, the algorithm options and minibatches per
sync by the number of workers; not the trainer's rate factors). For easgd, asgd
and masgd rank 0 is the server and its model the center.
"""
import argparse
import time

import numpy as np
import torch
import torch.nn.functional as F
from mpi4py import MPI

import psgd.torch                                                     # psgd 1/3
from psgd.data import load_mnist1d, shard_range
from psgd.agreement import abort_on_error
from psgd.compression import KINDS


def mnist1d_cnn(channels=(32, 32, 32), hidden=256, classes=10, length=40):
    layers, width = [], 1
    for c in channels:
        layers += [torch.nn.Conv1d(width, c, 5, padding=2), torch.nn.ReLU(), torch.nn.MaxPool1d(2)]
        width, length = c, length // 2
    model = torch.nn.Sequential(*layers, torch.nn.Flatten(), torch.nn.Linear(width * length, hidden),
                                torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.Linear(hidden, classes))
    for m in model:                   # psgd.nnet's init: He-uniform, Glorot for the output
        if isinstance(m, (torch.nn.Conv1d, torch.nn.Linear)):
            (torch.nn.init.xavier_uniform_ if m is model[-1] else torch.nn.init.kaiming_uniform_)(m.weight)
            torch.nn.init.zeros_(m.bias)
    return model


def accuracy(model, x, y):
    model.eval()
    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean())


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--algo", default="bsp", choices=psgd.ALGORITHMS)
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--blocks", type=int, default=None,
                   help="minibatches per sync (default: psgd.torch's for the algorithm and N)")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--compression", default="none", choices=KINDS,
                   help="quantize what is summed or pushed, with error feedback (not easgd)")
    p.add_argument("--compression-start", type=int, default=0, help="syncs sent uncompressed first")
    args = p.parse_args()
    abort_on_error()                  # an error on one rank ends the job, no hang
    torch.set_num_threads(1)
    torch.manual_seed(777)            # rank 0's initial model is everyone's anyway
    data = load_mnist1d()
    d = {k: torch.from_numpy(getattr(data, k)) for k in ("x_train", "y_train", "x_test", "y_test")}
    model = mnist1d_cnn()
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    compress = {} if args.compression == "none" else dict(           # its options, if any
        compression=args.compression, compression_start=args.compression_start)
    sync = psgd.torch.create(args.algo, model, **compress)            # psgd 2/3
    start = time.perf_counter()
    if sync.role == "server":
        sync.run()
    else:
        # psgd 3/3: syncgrad averages the gradients in every step() (summed
        # while backward runs); the others synchronize every --blocks steps
        opt = psgd.torch.DistributedOptimizer(opt, sync, samples=args.batch, every=args.blocks)
        k = MPI.COMM_WORLD.rank - (MPI.COMM_WORLD.size - sync.N)      # worker index
        lo, hi = shard_range(len(d["y_train"]), k, sync.N)
        steps = len(d["y_train"]) // sync.N // args.batch             # same on every worker
        for epoch in range(args.epochs):
            order = lo + torch.randperm(hi - lo, generator=torch.Generator().manual_seed(epoch * 1000 + k))
            model.train()
            for i in range(steps):
                batch = order[i * args.batch:(i + 1) * args.batch]
                opt.zero_grad()
                F.cross_entropy(model(d["x_train"][batch]), d["y_train"][batch]).backward()
                opt.step()
        opt.stop()
    if MPI.COMM_WORLD.rank == 0:
        print("%s np %d: held-out accuracy %.1f%% after %d epochs, %.1f s" % (
            args.algo, MPI.COMM_WORLD.size, 100 * accuracy(model, d["x_test"], d["y_test"]),
            args.epochs, time.perf_counter() - start), flush=True)


if __name__ == "__main__":
    main()
