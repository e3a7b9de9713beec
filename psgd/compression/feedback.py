"""The residuals of error feedback: what rounding dropped, sent later.

    e_k: this rank's, over the whole buffer    u_k = c_k + e_k
    r_j: this rank's as the owner of stripe j  v_j = S_j + r_j
Both start at 0 and are algorithm state (checkpointed, zeroed by reset_to).
They are per-worker state: a checkpoint taken at another rank count has
other stripes, so its residuals are dropped (zeroed) on resume; every key
starts with "residual" so a resume can tell them from the model's state.
"""
import numpy as np

PREFIX = "residual"


class ErrorFeedback:
    def __init__(self, size, stripe, dtype):
        self.worker = np.zeros(size, dtype)     # e_k
        self.owner = np.zeros(stripe, dtype)    # r_j

    def zero(self):
        self.worker.fill(0)
        self.owner.fill(0)

    def state_dict(self):
        return {PREFIX + "_worker": self.worker.copy(), PREFIX + "_owner": self.owner.copy()}

    def load_state_dict(self, state):
        """Residuals of this rank's own checkpoint; absent ones (another
        rank count, or a checkpoint without compression) start at 0."""
        for key, array in ((PREFIX + "_worker", self.worker), (PREFIX + "_owner", self.owner)):
            value = state.get(key)
            if value is not None and np.shape(value) == array.shape:
                array[...] = value
            else:
                array.fill(0)


def is_residual(key):
    """Whether a state key is per-worker residual state (zeroed on a resume
    at another rank count)."""
    return key.startswith(PREFIX)
