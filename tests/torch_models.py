"""Small torch models and a replayable local 'training' for the psgd.torch
tests: every rank starts from its own seed (so the broadcast of rank 0's model
is visible) and pulls its parameters toward per-(rank, step) targets, a step
the NumPy path can replay exactly."""
import numpy as np
import torch

LR = 0.1


def cnn(seed, dtype=torch.float32):
    """Conv1d + BatchNorm + Linear: parameters of four ranks, and buffers."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Conv1d(1, 3, 5), torch.nn.BatchNorm1d(3), torch.nn.ReLU(),
        torch.nn.Flatten(), torch.nn.Linear(3 * 12, 4))
    return model.to(dtype)


def flat(tensors):
    return np.concatenate([t.detach().cpu().numpy().ravel() for t in tensors])


def agreed(comm, tensors):
    """flat(tensors), the same bits on every rank (the replicas stay identical)."""
    got = flat(tensors)
    everyone = np.empty((comm.size, got.size), dtype=got.dtype)
    comm.Allgather(got, everyone)
    assert (everyone == everyone[0]).all()
    return got


def targets(model, rank, t):
    """The point rank `rank` pulls toward in step t, one array per parameter."""
    rng = np.random.default_rng(1000 * rank + t)
    return [rng.standard_normal(tuple(p.shape)).astype(p.detach().cpu().numpy().dtype)
            for p in model.parameters()]


def backward_toward(model, goal):
    """loss = sum 0.5 |p - goal|^2, so autograd leaves p.grad = p - goal."""
    loss = sum(0.5 * ((p - torch.as_tensor(g, device=p.device)) ** 2).sum()
               for p, g in zip(model.parameters(), goal))
    loss.backward()


def counts(rank, t):
    """Uneven sample counts: ranks weigh differently in the averages."""
    return 2 + (3 * rank + t) % 5
