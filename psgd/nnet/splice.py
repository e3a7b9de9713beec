"""Splice: frame context, Kaldi's <Splice> / splice-feats.

Input is (B, T, F) -- B utterances or chunks of T frames -- or a single
utterance (T, F). Frame t becomes the concatenation of frames t+o for each
offset o (default -K..K), so F -> len(offsets) * F. Offsets that fall
outside [0, T) repeat the edge frame (edge replication within each
sequence, never across sequences of a batch).
"""
from .component import Component


def _offsets(context, offsets):
    if offsets is None:
        k = int(context)
        if k < 0:
            raise ValueError("splice context must be >= 0, got %r" % (context,))
        return list(range(-k, k + 1))
    offsets = [int(o) for o in offsets]
    if not offsets:
        raise ValueError("splice needs at least one offset")
    return offsets


class Splice(Component):
    kind = "splice"

    def __init__(self, input_dim, context=2, offsets=None):
        super().__init__()
        self.input_dim = int(input_dim)
        self.offsets = _offsets(context, offsets)
        self.output_dim = self.input_dim * len(self.offsets)

    def output_shape(self, input_shape):
        if input_shape[-1] != self.input_dim:
            raise ValueError("Splice expects last dim %d, got shape %s"
                             % (self.input_dim, tuple(input_shape)))
        return tuple(input_shape[:-1]) + (self.output_dim,)

    def propagate(self, x, train=True):
        xp = self.xp
        self._single = x.ndim == 2
        if self._single:
            x = x[None]
        b, t, f = x.shape
        self._t = t
        # (T, O) source frame of every output slot, clamped at both edges
        idx = xp.arange(t)[:, None] + xp.asarray(self.offsets)[None, :]
        idx = xp.clip(idx, 0, t - 1)
        y = x[:, idx].reshape(b, t, len(self.offsets) * f)
        return y[0] if self._single else y

    def backpropagate(self, dy):
        xp = self.xp
        if self._single:
            dy = dy[None]
        b, t, _ = dy.shape
        f = self.input_dim
        dy = dy.reshape(b, t, len(self.offsets), f)
        dx = xp.zeros((b, t, f), dtype=dy.dtype)
        # adjoint of the clamped gather, one vectorised add per offset: the
        # in-range part is a shifted slice, the clamped parts pile onto the
        # first / last frame
        for j, o in enumerate(self.offsets):
            lo, hi = max(0, -o), min(t, t - o)  # output frames whose source is in range
            if lo < hi:
                dx[:, lo + o:hi + o] += dy[:, lo:hi, j]
            if lo > 0:
                dx[:, 0] += dy[:, :min(lo, t), j].sum(axis=1)
            if hi < t:
                dx[:, t - 1] += dy[:, max(hi, 0):, j].sum(axis=1)
        return dx[0] if self._single else dx

    def __repr__(self):
        return "Splice(%d, offsets=%s)" % (self.input_dim, self.offsets)
