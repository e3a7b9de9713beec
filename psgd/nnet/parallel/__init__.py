"""Hybrid data/model parallelism (Krizhevsky's "one weird trick"): layers
that slice fully connected layers by output units across MPI ranks while the
layers before them run data-parallel. Imports mpi4py, so psgd.nnet does not
import this package; `from psgd.nnet.parallel import HybridNetwork`.
"""
from . import requirements, traffic
from .collectives import Collectives
from .gather import GatherFeatures, GatherRows
from .loss import SlicedCrossEntropy
from .network import HybridNetwork
from .sliced import SlicedAffineTransform
from .syncbn import SyncBatchNorm

__all__ = ["Collectives", "GatherFeatures", "GatherRows", "HybridNetwork",
           "SlicedAffineTransform", "SlicedCrossEntropy", "SyncBatchNorm", "requirements",
           "traffic"]
