"""The residuals of error feedback: what rounding dropped, sent later.

    e_k: this rank's, over the whole buffer    u_k = c_k + e_k
    r_j: this rank's as the owner of stripe j  v_j = S_j + r_j
Both start at 0 and are algorithm state (checkpointed, zeroed by reset_to).
They are per-worker state: a checkpoint taken at another rank count has
other stripes, so its residuals are dropped (zeroed) on resume; every key
starts with "residual" so a resume can tell them from the model's state.
"""
import numpy as np

from ..backend import array_module, to_numpy

PREFIX = "residual"


class ErrorFeedback:
    def __init__(self, size, stripe, dtype, worker=None, owner=None):
        """`worker`, `owner`: arrays to keep e_k and r_j in (views another
        sum shares), else zeros of `size` and `stripe` elements."""
        self.worker = np.zeros(size, dtype) if worker is None else worker    # e_k
        self.owner = np.zeros(stripe, dtype) if owner is None else owner     # r_j

    def zero(self):
        self.worker.fill(0)
        self.owner.fill(0)

    def state_dict(self):
        return joined_state([self])

    def load_state_dict(self, state):
        """Residuals of this rank's own checkpoint; absent ones (another
        rank count, or a checkpoint without compression) start at 0."""
        load_joined([self], state)


KINDS = (PREFIX + "_worker", "worker"), (PREFIX + "_owner", "owner")


def joined_state(feedbacks):
    """The residuals of sums over consecutive ranges of one buffer (a
    reducer's buckets, in buffer order) under one sum's keys: each kind
    concatenated, so e_k keeps the buffer's layout."""
    return {key: np.concatenate([to_numpy(getattr(f, kind)) for f in feedbacks])
            for key, kind in KINDS}


def load_joined(feedbacks, state):
    """joined_state's inverse; a kind of another length (another rank count
    or bucket layout: other stripes), or absent, starts at 0."""
    for key, kind in KINDS:
        arrays = [getattr(f, kind) for f in feedbacks]
        value = state.get(key)
        if value is not None and np.shape(value) == (sum(a.size for a in arrays),):
            value = np.asarray(value)
            lo = 0
            for a in arrays:     # a device residual takes a device copy
                a[...] = array_module(a).asarray(value[lo:lo + a.size])
                lo += a.size
        else:
            for a in arrays:
                a.fill(0)


def is_residual(key):
    """Whether a state key is per-worker residual state (zeroed on a resume
    at another rank count)."""
    return key.startswith(PREFIX)
