"""bsp: sample-weighted model averaging (Kaldi's BspWorker).

    n = Allreduce(n_k); if n == 0: return False
    w <- sum_k (n_k / n) * w_k
"""
from .base import CollectiveWorker, Option, register


@register
class Bsp(CollectiveWorker):
    name = "bsp"
    OPTIONS = {"weighting": Option("samples", kind=("samples", "uniform"),
                                   help="the average's weights: each worker's sample count "
                                        "(default), or uniform over the workers that trained")}
    weighting: str

    @property
    def uniform_weights(self):
        return self.weighting == "uniform"

    def update(self, n_k, n, active):
        self.average(n_k, n, active, uniform=self.uniform_weights)
