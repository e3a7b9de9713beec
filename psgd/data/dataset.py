"""The container a trainer gets from any loader: train/test arrays plus shape facts.

Kaldi data keeps frames stacked (one row per frame) and remembers where each
utterance starts (`Utterances`), so the frame view for feedforward nets and
the utterance view for recurrent nets share one array instead of two copies.
"""
from dataclasses import dataclass, field, replace
from typing import Optional, Tuple

import numpy as np

from psgd.data.sharding import shard_range


@dataclass
class Utterances:
    """Utterance ids and their frame boundaries in a frame-stacked array.

    Utterance i owns rows offsets[i]:offsets[i + 1].
    """
    keys: list
    offsets: np.ndarray

    @classmethod
    def from_lengths(cls, keys, lengths):
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(np.asarray(lengths, dtype=np.int64), out=offsets[1:])
        return cls(list(keys), offsets)

    def __len__(self):
        return len(self.keys)

    @property
    def lengths(self):
        return np.diff(self.offsets)

    @property
    def num_frames(self):
        return int(self.offsets[-1])

    def split(self, array):
        """Per-utterance views (no copies) of a frame-stacked array."""
        o = self.offsets.tolist()
        return [array[o[i]:o[i + 1]] for i in range(len(self.keys))]


@dataclass
class Dataset:
    """Train and test (held-out / cross-validation) data of one worker.

    x_* are float32, y_* int64 class ids; x_test/y_test may be None when no
    held-out set was given. For Kaldi data `train_utts`/`test_utts` locate the
    utterances, `splice` is the context K (rows hold 2K+1 frames) and `cmvn`
    the (mean, std) per raw feature dimension currently applied to x_*.
    """
    x_train: object
    y_train: object
    x_test: object
    y_test: object
    num_classes: int
    input_shape: Tuple[int, ...]
    name: str
    train_utts: Optional[Utterances] = None
    test_utts: Optional[Utterances] = None
    splice: int = 0
    cmvn: Optional[tuple] = field(default=None, repr=False)

    @property
    def num_train(self):
        return len(self.y_train)

    @property
    def num_test(self):
        return 0 if self.y_test is None else len(self.y_test)

    def utterances(self, split="train"):
        """(features, labels): lists of per-utterance (T, D) and (T,) views."""
        utts = self.train_utts if split == "train" else self.test_utts
        x, y = (self.x_train, self.y_train) if split == "train" else (self.x_test, self.y_test)
        if utts is None:
            raise ValueError("%s has no utterance structure for %r" % (self.name, split))
        return utts.split(x), utts.split(y)

    def shard(self, rank, size, test=False):
        """This worker's contiguous share of the training examples (views).

        For data every rank holds whole (MNIST-1D); Kaldi data is sharded by
        utterance at load time instead. The test set is kept whole unless
        `test` is true, so every rank can evaluate the same examples.
        """
        if self.train_utts is not None:
            raise ValueError("%s is already sharded by utterance" % self.name)
        a, b = shard_range(self.num_train, rank, size)
        out = replace(self, x_train=self.x_train[a:b], y_train=self.y_train[a:b])
        if test and self.y_test is not None:
            c, d = shard_range(self.num_test, rank, size)
            out = replace(out, x_test=self.x_test[c:d], y_test=self.y_test[c:d])
        return out

    def to(self, xp):
        """A copy whose arrays live in array module `xp` (numpy or cupy)."""
        def move(a):
            return None if a is None else xp.asarray(a)
        return replace(self, x_train=move(self.x_train), y_train=move(self.y_train),
                       x_test=move(self.x_test), y_test=move(self.y_test))
