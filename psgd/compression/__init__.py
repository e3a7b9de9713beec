"""Compression on the wire (docs/algorithms.md, "Compression on the wire"):
the quantizers, the residuals of error feedback, and the striped sum that
sends each byte across a link about twice whatever the rank count."""
from .feedback import ErrorFeedback  # noqa: F401
from .quantizers import QUANTIZERS, CompressionOverflow, quantizer  # noqa: F401
from .stripes import StripedSum, stripe_bounds  # noqa: F401

KINDS = ("none",) + tuple(QUANTIZERS)
