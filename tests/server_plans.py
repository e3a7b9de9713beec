"""The workers of the server-algorithm MPI tests: their tensors, their
deterministic local 'training', and what each kind of worker syncs."""
import numpy as np

SHAPES = [(3, 4), (0,), (5,), (2, 1, 3)]
SIZE = sum(int(np.prod(s)) for s in SHAPES)
# worker kind -> (n_k of each synchronize, n_k passed to stop)
PLANS = {"many": ([3, 5, 2, 7, 4], 6), "never": ([], 0), "once": ([4], 0),
         "push_at_stop": ([], 5)}
KINDS = ["many", "never", "once", "push_at_stop"]


def plan(k):
    return PLANS[KINDS[(k - 1) % len(KINDS)]]


def initial(k):
    return [np.random.default_rng(k).standard_normal(s) for s in SHAPES]


def x0():
    return np.concatenate([a.ravel() for a in initial(0)])


def local(k, t):
    """The deterministic 'training' worker k does before its t-th sync."""
    return 0.1 * np.random.default_rng(1000 * k + t).standard_normal(SIZE)
