"""Kaldi features + frame targets for one worker (nnet1-style frame training).

    dataset, report = load_kaldi("scp:data/train/feats.scp", "ali.txt",
                                 rank=rank, size=size, splice=5,
                                 cv_feats="scp:data/cv/feats.scp", cv_targets="ali.txt")

Utterance ids are sorted, those without targets dropped, and the rest split
into contiguous shards of near-equal frames (shard_by_weight, the frames
taken from the targets' lengths); each worker reads only its shard's features. Left for the trainer, because they need
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

from psgd.data.alignment import read_targets, target_lengths
from psgd.data.cmvn import CmvnStats, normalize
from psgd.data.dataset import Dataset, Utterances
from psgd.data.kaldi_table import FeatureTable
from psgd.data.sharding import shard_by_weight
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
    no_target: list = field(default_factory=list)     # ids without targets (rank 0 only)
    nonfinite: list = field(default_factory=list)     # ids with NaN/Inf features, skipped

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


def _load_split(feats, targets, rank, size, num_classes, skip_nonfinite=False):
    table = FeatureTable(feats)
    # Utterances without targets are dropped before sharding, and shards are
    # balanced by frames (the targets' lengths), so no worker sits idle.
    lengths = target_lengths(targets, table.keys)
    have = [k for k in table.keys if k in lengths]
    keys = shard_by_weight(have, [lengths[k] for k in have], rank, size)
    start = have.index(keys[0]) if keys else 0
    report = SplitReport(feats, len(table.keys), (start, start + len(keys)))
    if rank == 0:   # counted once for the whole job
        report.no_target = [k for k in table.keys if k not in lengths]
    labels = read_targets(targets, keys)
    frames = table.read(keys)
    dim = table.dim()
    used, xs, ys = [], [], []
    for key in keys:
        x, y = frames[key], labels[key]
        if len(x) != len(y):
            warnings.warn("%s: utterance %s has %d frames but %d targets in %s; skipped"
                          % (feats, key, len(x), len(y), targets), stacklevel=3)
            report.mismatch.append(key)
            continue
        if not _finite(x, feats, key, skip_nonfinite):
            report.nonfinite.append(key)
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
        warnings.warn("%s: %d of %d utterances have no targets in %s; skipped"
                      % (feats, len(report.no_target), len(table.keys), targets), stacklevel=3)
    utts = Utterances.from_lengths(used, [len(y) for y in ys])
    report.used, report.frames = len(used), utts.num_frames
    x = np.concatenate(xs) if xs else np.zeros((0, dim), dtype=np.float32)
    y = np.concatenate(ys) if ys else np.zeros(0, dtype=np.int64)
    return x, y, utts, report, dim


def _finite(x, feats, key, skip):
    """A NaN or Inf would poison the global CMVN and every rank's model:
    refuse the utterance by name (or, with skip, leave it out)."""
    bad = ~np.isfinite(x)
    if not bad.any():
        return True
    frame = int(np.nonzero(bad.any(axis=1))[0][0])
    where = "%s: utterance %s: non-finite feature value (%s) at frame %d" % (
        feats, key, x[frame][bad[frame]][0], frame)
    if not skip:
        raise UsageError(where + " (--skip-nonfinite leaves such utterances out)")
    warnings.warn(where + ": utterance skipped (--skip-nonfinite)", stacklevel=4)
    return False


def load_kaldi(feats_rspecifier, targets, rank=0, size=1, splice=0, cmvn=True,
               num_classes=None, cv_feats=None, cv_targets=None, skip_nonfinite=False):
    """(Dataset, KaldiReport) of this worker's shard of a Kaldi training set.

    targets: an int-vector table ("ark:ali.ark", "scp:ali.scp") or a text
    alignment ("ali.txt" / "ark,t:ali.txt", lines "utt id id ..."). Utterances
    without targets are left out before sharding; shards balance frames.
    skip_nonfinite: leave out utterances with NaN/Inf features (with a
    warning) instead of refusing them. cv_*
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
                                                num_classes, skip_nonfinite)
    cx = cy = cv_utts = cv_report = None
    if cv_feats is not None:
        cx, cy, cv_utts, cv_report, cv_dim = _load_split(cv_feats, cv_targets, rank, size,
                                                         num_classes, skip_nonfinite)
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
