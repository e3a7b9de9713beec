"""Dropout with inverted scaling: kept units are scaled by 1/(1-rate) during
training, so evaluation is the identity and needs no rescaling."""
from .component import Component


class Dropout(Component):
    kind = "dropout"

    def __init__(self, rate=0.5, seed=None):
        super().__init__()
        if not 0 <= rate < 1:
            raise ValueError("dropout rate must be in [0, 1), got %r" % (rate,))
        self.rate = float(rate)
        self._seed = seed
        self._rng = None

    def init_params(self, rng):
        # the network's seed decides the masks unless one was given explicitly
        if self._seed is None:
            self.reseed(int(rng.integers(2 ** 63)))

    def reseed(self, seed):
        """Restart the mask stream: the same seed gives the same masks."""
        self._seed = int(seed)
        self._rng = self.xp.random.default_rng(self._seed)

    def propagate(self, x, train=True):
        if not train or self.rate == 0:
            self._mask = None
            return x
        if self._rng is None:
            self.reseed(self._seed or 0)
        # one draw, one compare, one scale: the mask holds 0 or 1/(1-rate)
        mask = self._rng.random(x.shape, dtype=x.dtype) >= self.rate
        self._mask = mask.astype(x.dtype) * (1.0 / (1.0 - self.rate))
        return x * self._mask

    def backpropagate(self, dy):
        if self._mask is None:
            return dy
        return dy * self._mask

    def __repr__(self):
        return "Dropout(%g)" % self.rate
