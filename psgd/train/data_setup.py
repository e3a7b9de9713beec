"""Each rank's data: its training shard and its share of the held-out set.

Workers read only their own shard. Whatever needs every worker's numbers
(global CMVN, the class count, the skip counts) is reduced over the job
here. Under a server algorithm rank 0 trains on nothing; it still takes a
share of the held-out evaluation of MNIST-1D.
"""
import warnings
from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

from .. import agreement
from ..data import (CmvnStats, apply_cmvn, chunk_utterances, load_kaldi, load_mnist1d,
                    shard_range)
from ..errors import CollectiveUsageError, UsageError
from ..kaldi_io import FeatureTransform
from . import model_files

MNIST1D_SEED = 42  # the package's standard data set; --seed drives training only


@dataclass
class RankData:
    x_train: object
    y_train: object
    x_eval: object
    y_eval: object
    num_classes: int
    input_shape: tuple
    name: str
    total_train: int = 0       # examples (frames) over all workers
    total_eval: int = 0
    skipped: tuple = (0, 0)    # utterances skipped: label/frame mismatch, no targets


def _empty(shape, dtype=np.float32):
    return np.zeros((0,) + tuple(shape), dtype=dtype)


def read_local(config, rank, worker_index):
    """This rank's own reading; no MPI, so a failure here can be agreed on
    (agreement.agree) before any rank enters a collective."""
    spec, size, num_workers = config.data, config.run.size, config.run.num_workers
    if spec.feats is None:
        ds = load_mnist1d(spec.num_samples, seed=MNIST1D_SEED)
        if worker_index is None:
            xt, yt = _empty(ds.input_shape), np.zeros(0, np.int64)
        else:
            a, b = shard_range(ds.num_train, worker_index, num_workers)
            xt, yt = ds.x_train[a:b], ds.y_train[a:b]
        c, d = shard_range(ds.num_test, rank, size)
        return RankData(xt, yt, ds.x_test[c:d], ds.y_test[c:d], ds.num_classes,
                        tuple(ds.input_shape), "mnist1d")
    transform = model_files.read_transform(spec.feature_transform, config.model.init)
    if worker_index is None:
        return None, None, transform
    ds, report = load_kaldi(spec.feats, spec.targets, worker_index, num_workers,
                            splice=0 if transform else spec.splice, cmvn=False,
                            num_classes=spec.num_classes, cv_feats=spec.cv_feats,
                            cv_targets=spec.cv_targets,
                            skip_nonfinite=config.faults.skip_nonfinite)
    return ds, report, transform


def combine(config, comm, local, worker_index, sequences=False):
    """Collective: global CMVN, class count and example counts."""
    spec = config.data
    data = local if spec.feats is None else _kaldi(spec, config.model.init, comm, local,
                                                     worker_index)
    if sequences:
        data = _as_sequences(data, config.model.bptt)
    counts = np.array([len(data.y_train), len(data.y_eval)], dtype=np.int64)
    comm.Allreduce(MPI.IN_PLACE, counts, op=MPI.SUM)
    data.total_train, data.total_eval = int(counts[0]), int(counts[1])
    if data.total_train == 0:
        raise UsageError("no training data on any worker")
    return data


def _kaldi(spec, init, comm, local, worker_index):
    """`spec`: the Data section; `init`: --init, whose .npz may hold the transform."""
    ds, report, transform = local
    given = transform is not None   # --feature-transform, or the one of an --init .npz
    if ds is not None:
        stats, dim = report.cmvn_stats.pack(), report.feat_dim
        facts = np.array([dim, report.max_label, report.train.skipped_mismatch,
                          report.train.skipped_no_target], dtype=np.int64)
    else:
        facts = np.array([-1, -1, 0, 0], dtype=np.int64)
    # The feature dimension, then the global statistics (the server adds zeros).
    dims = np.array([facts[0], -facts[0] if facts[0] >= 0 else -(2 ** 62)], dtype=np.int64)
    comm.Allreduce(MPI.IN_PLACE, dims, op=MPI.MAX)
    dim, min_dim = int(dims[0]), -int(dims[1])
    if dim != min_dim:
        raise UsageError("workers read features of different dimensions (%d and %d)" % (min_dim, dim))
    if ds is None:
        stats = np.zeros(2 * dim + 1)
    comm.Allreduce(MPI.IN_PLACE, stats, op=MPI.SUM)
    comm.Allreduce(MPI.IN_PLACE, facts[1:2], op=MPI.MAX)
    comm.Allreduce(MPI.IN_PLACE, facts[2:], op=MPI.SUM)
    if not spec.num_classes:
        _refuse_stray_label(spec, comm, ds, int(facts[1]))
    num_classes = spec.num_classes or int(facts[1]) + 1
    global_stats = CmvnStats.unpack(stats)
    if global_stats.count == 0:
        raise UsageError("%s: no usable utterances on any worker" % spec.feats)
    if not given:
        mean_std = global_stats.mean_std() if spec.cmvn else (None, None)
        transform = FeatureTransform.from_cmvn(dim, spec.splice, *mean_std)
    elif transform.input_dim != dim:
        # every rank holds the same transform and dimension: all raise this together
        raise CollectiveUsageError(
            "%s expects inputs of shape (%d,) (its feature transform), %s has features of "
            "dimension %d" % (spec.feature_transform or init, transform.input_dim,
                              spec.feats, dim))
    counts = _class_counts(comm, ds, num_classes)
    shape = (transform.output_dim,)
    skipped = (int(facts[2]), int(facts[3]))
    if ds is None:
        data = RankData(_empty(shape), np.zeros(0, np.int64), _empty(shape),
                        np.zeros(0, np.int64), num_classes, shape, "kaldi", skipped=skipped)
        data.feature_transform, data.class_counts = transform, counts
        return data
    if given:
        _apply_transform(ds, transform)
    elif spec.cmvn:
        ds = apply_cmvn(ds, global_stats)
    if len(ds.y_train) == 0:
        warnings.warn("worker %d has no training utterances (more workers than utterances)"
                      % worker_index)
    x_eval = ds.x_test if ds.x_test is not None else _empty(shape)
    y_eval = ds.y_test if ds.y_test is not None else np.zeros(0, np.int64)
    data = RankData(ds.x_train, ds.y_train, x_eval, y_eval, num_classes, shape, "kaldi",
                    skipped=skipped)
    data.utts = (ds.train_utts, ds.test_utts)
    data.feature_transform, data.class_counts = transform, counts
    return data


STRAY_LABEL = 1000000  # a class id this large is a typo or a corrupt alignment
STRAY_GAP = 64         # ... and so is one this far beyond twice the next largest


def _refuse_stray_label(spec, comm, ds, top):
    """Collective. Without --num-classes the class count is the largest
    label + 1: one stray label (100000 among 0..9) would grow the output
    layer a thousandfold, or ask for terabytes. Refuse a largest label over
    STRAY_LABEL, or over twice the next largest plus STRAY_GAP, naming the
    utterance."""
    splits = [] if ds is None else [(spec.targets, ds.y_train, ds.train_utts),
                                    (spec.cv_targets, ds.y_test, ds.test_utts)]
    below = np.array([max([int(y[y < top].max(initial=-1)) for _, y, _ in splits
                           if y is not None], default=-1)], dtype=np.int64)
    comm.Allreduce(MPI.IN_PLACE, [below, MPI.INT64_T], op=MPI.MAX)
    error = None
    if top > STRAY_LABEL or top > 2 * int(below[0]) + STRAY_GAP:
        for path, y, utts in splits:
            if y is not None and len(y) and (y == top).any():
                i = int(np.searchsorted(utts.offsets, int(np.argmax(y == top)), side="right")) - 1
                error = UsageError("%s: utterance %s: label %d is far beyond the others (the "
                                   "next largest is %d); give --num-classes if it is meant"
                                   % (path, utts.keys[i], top, int(below[0])))
                break
    agreement.agree(comm, error)


def _class_counts(comm, ds, num_classes):
    """Training frames per class over all workers (ali_train_pdf.counts)."""
    counts = np.zeros(num_classes, dtype=np.int64)
    if ds is not None and len(ds.y_train):
        counts += np.bincount(ds.y_train, minlength=num_classes)[:num_classes]
    comm.Allreduce(MPI.IN_PLACE, [counts, MPI.INT64_T], op=MPI.SUM)
    return counts


def _apply_transform(ds, transform):
    """A Kaldi feature transform in place of psgd's splice + CMVN (per utterance)."""
    ds.x_train = transform.apply(ds.x_train, ds.train_utts.offsets)
    if ds.x_test is not None:
        ds.x_test = transform.apply(ds.x_test, ds.test_utts.offsets)


def _as_sequences(data, bptt):
    """LSTM input: (B, T, F) chunks of --bptt frames with per-frame labels
    (-1 marks padding); MNIST-1D examples are sequences of 40 one-dim frames."""
    if data.name == "mnist1d":
        def seq(x):
            return np.ascontiguousarray(np.transpose(x, (0, 2, 1)))
        data.x_train, data.x_eval = seq(data.x_train), seq(data.x_eval)
        data.input_shape = (data.input_shape[1], data.input_shape[0])
        return data
    train_utts, eval_utts = getattr(data, "utts", (None, None))
    feat = data.input_shape[0]
    if train_utts is not None:
        data.x_train, data.y_train = chunk_utterances(data.x_train, data.y_train,
                                                      train_utts.offsets, bptt)
    else:
        data.x_train, data.y_train = _empty((bptt, feat)), np.zeros((0, bptt), np.int64)
    if eval_utts is not None:
        data.x_eval, data.y_eval = chunk_utterances(data.x_eval, data.y_eval,
                                                    eval_utts.offsets, bptt)
    else:
        data.x_eval, data.y_eval = _empty((bptt, feat)), np.zeros((0, bptt), np.int64)
    data.input_shape = (bptt, feat)
    return data
