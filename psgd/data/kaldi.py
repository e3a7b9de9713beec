"""Kaldi features + frame targets for one worker (nnet1-style frame training).

    dataset, report = load_kaldi("scp:data/train/feats.scp", "ali.txt",
                                 rank=rank, size=size, splice=5,
                                 cv_feats="scp:data/cv/feats.scp", cv_targets="ali.txt")

Utterance ids are sorted and split into contiguous shards (shard_range);
each worker reads only its shard. Left for the trainer, because they need
every worker's numbers (an Allreduce):
  * global CMVN: load_kaldi normalises with its own shard's statistics;
    Allreduce(SUM) `report.cmvn_stats.pack()` and call
    `apply_cmvn(dataset, CmvnStats.unpack(total))` to switch to global ones;
  * the class count when num_classes is not given: Allreduce(MAX)
    `report.max_label` and set `dataset.num_classes = max + 1`;
  * the counts: Allreduce(SUM) `report.train.counts()`.
The frame view (dataset.x_train (N, (2K+1)F), y_train (N,)) suits
feedforward nets, shuffled across utterances by Minibatches; the utterance
view is `dataset.utterances()` or, cut for truncated BPTT,
`chunk_utterances(x, y, dataset.train_utts.offsets, T)`.
"""
import warnings
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from psgd.data.alignment import read_targets
from psgd.data.cmvn import CmvnStats, normalize
from psgd.data.dataset import Dataset, Utterances
from psgd.data.kaldi_table import FeatureTable
from psgd.data.sharding import shard_items, shard_range
from psgd.data.splice import splice_frames
from psgd.errors import UsageError


@dataclass
class SplitReport:
    """What one worker read of one feature table."""
    feats: str
    num_utts: int                                     # in the whole table
    shard: tuple                                      # (start, stop) in sorted ids
    used: int = 0
    frames: int = 0
    mismatch: list = field(default_factory=list)      # ids: #targets != #frames
    no_target: list = field(default_factory=list)     # ids without targets

    @property
    def skipped_mismatch(self):
        return len(self.mismatch)

    @property
    def skipped_no_target(self):
        return len(self.no_target)

    def counts(self):
        """[used, skipped_mismatch, skipped_no_target, frames] for an Allreduce(SUM)."""
        return np.array([self.used, self.skipped_mismatch, self.skipped_no_target,
                         self.frames], dtype=np.int64)


@dataclass
class KaldiReport:
    train: SplitReport
    cv: Optional[SplitReport]
    feat_dim: int              # raw, before splicing
    max_label: int             # largest target this worker saw (train and cv); -1 if none
    cmvn_stats: CmvnStats      # of this worker's raw training frames


def _load_split(feats, targets, rank, size, num_classes):
    table = FeatureTable(feats)
    keys = shard_items(table.keys, rank, size)
    report = SplitReport(feats, len(table.keys), shard_range(len(table.keys), rank, size))
    labels = read_targets(targets, keys)
    frames = table.read([k for k in keys if k in labels])
    dim = table.dim()
    used, xs, ys = [], [], []
    for key in keys:
        if key not in labels:
            report.no_target.append(key)
            continue
        x, y = frames[key], labels[key]
        if len(x) != len(y):
            warnings.warn("%s: utterance %s has %d frames but %d targets in %s; skipped"
                          % (feats, key, len(x), len(y), targets), stacklevel=3)
            report.mismatch.append(key)
            continue
        bad = (y < 0) if num_classes is None else (y < 0) | (y >= num_classes)
        if bad.any():
            limit = ">= 0" if num_classes is None else "0..%d" % (num_classes - 1)
            raise UsageError("%s: utterance %s: target %d is outside %s"
                             % (targets, key, y[bad][0], limit))
        used.append(key)
        xs.append(x)
        ys.append(y)
    if report.no_target:
        warnings.warn("%s: %d of %d utterances of this shard have no targets in %s; skipped"
                      % (feats, len(report.no_target), len(keys), targets), stacklevel=3)
    utts = Utterances.from_lengths(used, [len(y) for y in ys])
    report.used, report.frames = len(used), utts.num_frames
    x = np.concatenate(xs) if xs else np.zeros((0, dim), dtype=np.float32)
    y = np.concatenate(ys) if ys else np.zeros(0, dtype=np.int64)
    return x, y, utts, report, dim


def load_kaldi(feats_rspecifier, targets, rank=0, size=1, splice=0, cmvn=True,
               num_classes=None, cv_feats=None, cv_targets=None):
    """(Dataset, KaldiReport) of this worker's shard of a Kaldi training set.

    targets: an int-vector table ("ark:ali.ark", "scp:ali.scp") or a text
    alignment ("ali.txt" / "ark,t:ali.txt", lines "utt id id ..."). cv_*
    name an optional held-out set, sharded the same way and normalised with
    the training statistics. splice: context K frames each side.
    """
    if int(splice) != splice or splice < 0:
        raise UsageError("splice must be an integer >= 0, got %r" % (splice,))
    if num_classes is not None and (int(num_classes) != num_classes or num_classes < 1):
        raise UsageError("num_classes must be a positive integer, got %r" % (num_classes,))
    if (cv_feats is None) != (cv_targets is None):
        raise UsageError("give both cv features and cv targets, or neither")

    x, y, utts, train_report, dim = _load_split(feats_rspecifier, targets, rank, size,
                                                num_classes)
    cx = cy = cv_utts = cv_report = None
    if cv_feats is not None:
        cx, cy, cv_utts, cv_report, cv_dim = _load_split(cv_feats, cv_targets, rank, size,
                                                         num_classes)
        if cv_dim != dim:
            raise UsageError("%s has features of dimension %d but %s of %d"
                             % (cv_feats, cv_dim, feats_rspecifier, dim))

    stats = CmvnStats.from_frames(x)
    applied = None
    if cmvn and stats.count > 0:
        applied = stats.mean_std()
        for a in (x, cx):
            if a is not None:
                normalize(a, *applied)
    x = splice_frames(x, utts.offsets, splice)
    if cx is not None:
        cx = splice_frames(cx, cv_utts.offsets, splice)

    max_label = max([int(a.max()) for a in (y, cy) if a is not None and len(a)], default=-1)
    dataset = Dataset(
        x_train=x, y_train=y, x_test=cx, y_test=cy,
        num_classes=int(num_classes) if num_classes is not None else max_label + 1,
        input_shape=(dim * (2 * int(splice) + 1),), name="kaldi:%s" % feats_rspecifier,
        train_utts=utts, test_utts=cv_utts, splice=int(splice), cmvn=applied)
    return dataset, KaldiReport(train_report, cv_report, dim, max_label, stats)
