"""Data for psgd workers: MNIST-1D, Kaldi features/targets, shards, minibatches.

Floor 3: imports only psgd.errors and psgd.backend; sharding takes plain
(rank, size) integers, and whatever needs every rank's numbers (global CMVN,
class count) is returned as statistics for the trainer to Allreduce.
"""
from psgd.data.chunks import PAD_LABEL, chunk_utterances
from psgd.data.cmvn import CmvnStats, apply_cmvn
from psgd.data.dataset import Dataset, Utterances
from psgd.data.kaldi import KaldiReport, SplitReport, load_kaldi
from psgd.data.minibatch import Minibatches, ShardStream, epoch_permutation
from psgd.data.mnist1d import load_mnist1d
from psgd.data.sharding import shard_indices, shard_items, shard_range
from psgd.data.splice import splice_frames

__all__ = [
    "CmvnStats", "Dataset", "KaldiReport", "Minibatches", "PAD_LABEL", "ShardStream", "SplitReport",
    "Utterances", "apply_cmvn", "chunk_utterances", "epoch_permutation", "load_kaldi",
    "load_mnist1d", "shard_indices", "shard_items", "shard_range", "splice_frames",
]
