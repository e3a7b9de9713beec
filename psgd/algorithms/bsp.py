"""bsp: sample-weighted model averaging (Kaldi's BspWorker).

    n = Allreduce(n_k); if n == 0: return False
    w <- sum_k (n_k / n) * w_k
Compressed (compressed.py): w <- s + sum_k (n_k / n) * (w_k - s), s the
model of the last sync, kept for that only.
"""
from ..buffers import host_copy
from . import compressed
from .base import CollectiveWorker, register
from .option import Option


@register
class Bsp(CollectiveWorker):
    name = "bsp"
    OPTIONS = {"weighting": Option("samples", kind=("samples", "uniform"),
                                   help="the average's weights: each worker's sample count "
                                        "(default), or uniform over the workers that trained"),
               **compressed.OPTIONS}

    def initialized(self):
        self.start_model = self.buffer.like() if self.compressed is not None else None
        self.restart()

    def restart(self):
        if self.start_model is not None:
            self.start_model.data[...] = self.buffer.data

    @property
    def uniform_weights(self):
        return self.weighting == "uniform"

    def update(self, n_k, n, active):
        self.average(n_k, n, active, uniform=self.uniform_weights)
        self.restart()

    def start_point(self):
        return self.start_model.data

    def state_dict(self):
        state = self.compression_state()
        if self.start_model is not None:
            state["start_model"] = host_copy(self.start_model.data)
        return state

    def load_state_dict(self, state):
        # a checkpoint taken without compression: it was taken right after
        # a sync, so the start point is the model itself
        if self.start_model is not None and "start_model" not in state:
            state = dict(state, start_model=host_copy(self.buffer.data))
        super().load_state_dict(state)

    def _load_state(self, state):
        super()._load_state(state)
        if self.start_model is not None:
            self.start_model.data[...] = self.buffer.xp.asarray(state["start_model"])
