"""The two communicating layers of the hybrid network.

GatherRows is the boundary between the data-parallel layers (each rank its
own B/N samples) and the model-parallel ones (every rank the whole
minibatch): forward it Allgathers the rows, backward it hands each rank the
rows of its own samples. GatherFeatures joins the output slices of a sliced
layer into the full activations the next layer needs.

Backward, both are the adjoint of an Allgather. When the layer they feed is
sliced, every rank holds only a partial sum of the input gradient (its W
slice's share of dy W), so the adjoint is a Reduce_scatter: the sum over
ranks, of which each keeps its own part -- half the bytes of an Allreduce
followed by a slice. When it feeds a replicated layer, the gradient is
already whole and identical on every rank and each just keeps its part.
"""
from ..component import Component


class _Gather(Component):
    def __init__(self, collectives, partial_grad=True):
        super().__init__()
        self.coll = collectives
        self.rank, self.size = collectives.rank, collectives.size
        #: whether the gradient from the next layer is a per-rank partial sum
        self.partial_grad = bool(partial_grad)


class GatherRows(_Gather):
    """(b, ...) on each rank -> (N*b, ...): rank r's samples are rows r*b..(r+1)*b."""

    kind = "gatherrows"

    def propagate(self, x, train=True):
        self._rows = x.shape[0]
        gathered = self.coll.allgather(x, "activations", self.xp)
        return gathered.reshape((self.size * x.shape[0],) + tuple(x.shape[1:]))

    def backpropagate(self, dy):
        b = self._rows
        if not self.partial_grad:
            return dy[self.rank * b:(self.rank + 1) * b]
        pieces = dy.reshape((self.size, b) + tuple(dy.shape[1:]))
        return self.coll.reduce_scatter(pieces, "activations", self.xp)

    def __repr__(self):
        return "GatherRows(%d ranks)" % self.size


class GatherFeatures(_Gather):
    """(..., f) slices of the last axis -> (..., N*f), rank order."""

    kind = "gatherfeatures"

    def output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (input_shape[-1] * self.size,)

    def propagate(self, x, train=True):
        self._width = f = x.shape[-1]
        gathered = self.coll.allgather(x, "activations", self.xp)  # (N, ..., f)
        lead = tuple(x.shape[:-1])
        # (N, ..., f) -> (..., N, f): the one copy that lays slices side by side
        return self.xp.moveaxis(gathered, 0, -2).reshape(lead + (self.size * f,))

    def backpropagate(self, dy):
        f, xp = self._width, self.xp
        if not self.partial_grad:
            return xp.ascontiguousarray(dy[..., self.rank * f:(self.rank + 1) * f])
        lead = tuple(dy.shape[:-1])
        pieces = xp.moveaxis(dy.reshape(lead + (self.size, f)), -2, 0)
        return self.coll.reduce_scatter(xp.ascontiguousarray(pieces), "activations", xp)

    def __repr__(self):
        return "GatherFeatures(%d ranks)" % self.size
