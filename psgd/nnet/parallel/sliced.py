"""SlicedAffineTransform: rank r's slice of an AffineTransform by output units.

Rank r holds rows r*o/N..(r+1)*o/N of W (o, in) and of b, and computes
those output units for the whole (gathered) minibatch. Its weight gradient
needs nothing from other ranks: each rank owns its rows. Its input gradient
dy_r W_r is a partial sum -- the full one is the sum over ranks -- which the
GatherRows/GatherFeatures layer in front of it reduce-scatters.
"""
from ..affine import AffineTransform
from ..component import fill_uniform, glorot_limit, he_limit


class SlicedAffineTransform(AffineTransform):
    kind = "affine"  # parameter names match the unsliced layer's

    def __init__(self, input_dim, full_output_dim, rank, size, init="glorot"):
        if full_output_dim % size:
            raise ValueError("%d output units do not split over %d ranks"
                             % (full_output_dim, size))
        super().__init__(input_dim, full_output_dim // size, init=init)
        self.full_output_dim = int(full_output_dim)
        self.rank, self.size = int(rank), int(size)

    @property
    def rows(self):
        """The rows of the full W (and entries of b) this rank holds."""
        return slice(self.rank * self.output_dim, (self.rank + 1) * self.output_dim)

    def init_params(self, rng):
        # the full layer's fan-out sets the scale, not the slice's
        limit = (he_limit(self.input_dim) if self.init == "he"
                 else glorot_limit(self.input_dim, self.full_output_dim))
        fill_uniform(self.W, rng, limit)
        self.b[...] = 0

    def __repr__(self):
        return "SlicedAffineTransform(%d, %d of %d, rank %d)" % (
            self.input_dim, self.output_dim, self.full_output_dim, self.rank)
