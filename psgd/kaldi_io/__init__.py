"""Kaldi nnet1 models and feature transforms in and out (floor 3: uses
psgd.nnet's components and psgd.data; psgd.nnet does not know this package).
The trainer reads and writes nnet1 models through it; the Kaldi tools
(psgd.kaldi, above the trainer) are built on it and re-export it.

    encoding.py           Kaldi's binary/text tokens, ints, floats, vectors, matrices
    components.py         the nnet1 component table (fields in Kaldi's order)
    nnet1.py              <Nnet> ... </Nnet> files: read, write, info
    convert.py            nnet1 components <-> psgd networks (exact, or refused by name)
    feature_transform.py  Splice + AddShift + Rescale (train.sh's final.feature_transform)
    priors.py             ali_train_pdf.counts and nnet-forward's log priors
    posteriors.py         log-posteriors and pseudo log-likelihoods of an utterance
"""
from .components import Layer
from .convert import layers_of, network_from_spec, network_of, spec_of
from .encoding import KaldiFormatError
from .feature_transform import FeatureTransform
from .nnet1 import encode_nnet, info, parse_nnet, read_nnet, write_nnet
from .posteriors import log_posteriors, pseudo_log_likelihoods
from .priors import log_priors, read_counts, write_counts

__all__ = [
    "FeatureTransform", "KaldiFormatError", "Layer", "encode_nnet", "info", "layers_of",
    "log_posteriors", "log_priors", "network_from_spec", "network_of", "parse_nnet",
    "pseudo_log_likelihoods", "read_counts", "read_nnet", "spec_of", "write_counts",
    "write_nnet",
]
