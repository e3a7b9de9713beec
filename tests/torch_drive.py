"""Drive psgd.torch and the NumPy API side by side with the same steps
(tests/mpi/torch: equivalence on the CPU and its GPU twins)."""
import numpy as np
import torch

import psgd
import psgd.torch
from psgd.algorithms import by_n
from torch_models import LR, backward_toward, cnn, counts, flat, targets

STEPS = 4


def in_turns(comm, workers, rank, action):
    """Run action() on worker ranks one after the other (server: not at all)."""
    if workers is None:
        return
    for k in range(1, comm.size):
        if rank == k:
            action()
        workers.Barrier()


def drive(comm, name, step_torch, step_numpy, device="cpu", zero_to_none=True, **options):
    """(torch path's final flat model, NumPy path's) on this rank; `options`
    the algorithm's, on both."""
    from mpi4py import MPI
    rank = comm.rank
    server_based = psgd.algorithms.REGISTRY[name].server_based
    workers = comm.Split(0 if rank > 0 or not server_based else MPI.UNDEFINED, rank)
    workers = None if workers == MPI.COMM_NULL else workers

    model = cnn(seed=rank).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    sync = psgd.torch.create(name, model, comm=comm, **options)
    params = [a.copy() for a in [p.detach().cpu().numpy() for p in cnn(seed=rank).parameters()]]
    if name != "syncgrad":     # psgd.torch's defaults: the trainer's by N
        options = by_n.given_over(name, comm.size, options)
    ref = psgd.create(name, params, comm=comm, **options, **(
        {"grads": [np.zeros_like(a) for a in params]} if name == "syncgrad" else {}))

    for run, obj in (("torch", sync), ("numpy", ref)):
        if obj.role == "server":
            obj.run()
            continue
        for t in range(STEPS):
            goal, n_k = targets(model, rank, t), counts(rank, t)
            if run == "torch":
                opt.zero_grad(set_to_none=zero_to_none)
                step = lambda: step_torch(sync, model, opt, goal, n_k)  # noqa: E731
            else:
                step = lambda: step_numpy(ref, goal, n_k)  # noqa: E731
            if server_based:
                in_turns(comm, workers, rank, step)
            else:
                step()
        if server_based:
            in_turns(comm, workers, rank, obj.stop)
        else:
            obj.stop(0)
    if workers is not None:
        workers.Free()
    return flat(model.parameters()), np.concatenate([a.ravel() for a in ref.params])


def model_step_torch(sync, model, opt, goal, n_k):
    backward_toward(model, goal)
    opt.step()
    sync.synchronize(n_k, optimizer=opt)


def model_step_numpy(ref, goal, n_k):
    for w, g in zip(ref.params, goal):
        w -= LR * (w - g)
    ref.synchronize(n_k)


def grad_step_torch(sync, model, opt, goal, n_k):
    backward_toward(model, goal)
    sync.synchronize(n_k)
    opt.step()


def grad_step_numpy(ref, goal, n_k):
    for w, g, grad in zip(ref.params, goal, ref.grads):
        grad[...] = w - g
    ref.synchronize(n_k)
    for w, grad in zip(ref.params, ref.grads):
        w -= LR * grad
