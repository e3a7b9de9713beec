"""The Kaldi tools: command-line entry points on top, beside psgd.worker
(they load .npz models through psgd.train, as the worker CLI does):

    python -m psgd.kaldi convert IN OUT [--binary false] | info FILE
    python -m psgd.kaldi.forward MODEL FEATS OUT [--class-frame-counts FILE]

The formats themselves are psgd.kaldi_io (below the trainer, which reads
and writes nnet1 models); its API is re-exported here.
"""
from psgd.kaldi_io import *  # noqa: F401,F403
from psgd.kaldi_io import __all__  # noqa: F401
