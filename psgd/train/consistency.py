"""Flags that would do nothing are errors, or take effect and say so:
model flags beside --init, a resumed run whose flags differ from its
checkpoint's, --gpu-ids on the numpy backend."""
import warnings

import numpy as np

from ..errors import UsageError
from ..nnet.optimizers import momentum_option
from .algorithm_flags import ALGORITHM_FLAGS

MODEL_FLAGS = ("hidden", "channels", "lstm_cells", "dropout", "batchnorm")
# What the checkpoint's state was made of: resuming under another value
# would load it into a different model, data set or algorithm.
FIXED_ON_RESUME = ("algo", "model", "hidden", "channels", "lstm_cells", "batchnorm", "dropout",
                   "num_samples", "feats", "targets", "cv_feats", "cv_targets", "splice",
                   "num_classes", "cmvn", "optimizer", "model_parallel", "sync_bn", "bptt",
                   "lr_schedule")
# Read from the flags every epoch, and the algorithm's options (its state
# is checked against them as it loads): a new value simply holds from the
# resumed epoch on, and the log says so. --servers: the center is cut again.
FOLLOWED_ON_RESUME = ("epochs", "minibatch_size", "sync_period", "seed", "lr_decay",
                      "newbob_start", "newbob_end", "newbob_factor", "servers",
                      "work_shares") + tuple(
                          ALGORITHM_FLAGS)
# Restored from the checkpoint's optimizer state unless given anew: the new
# value is written into the state before it is loaded.
OPTIMIZER_OPTIONS = ("lr", "momentum", "weight_decay", "clip")


def _flag(name):
    return "--" + name.replace("_", "-")


def _same(a, b):
    if isinstance(a, str) and isinstance(b, str):
        return a.replace(" ", "") == b.replace(" ", "")
    return a == b


# Files only rank 0 writes: another rank's value is never used.
RANK0_OUTPUTS = ("out", "metrics", "plot", "timeline")


def flags(args):
    """{--flag: value} of every option that every rank acts on, for
    comparing them across ranks."""
    def plain(v):
        return v is None or isinstance(v, (bool, int, float, str)) or (
            isinstance(v, (list, tuple)) and all(plain(x) for x in v))
    return {_flag(k): (list(v) if isinstance(v, tuple) else v)
            for k, v in sorted(vars(args).items()) if plain(v) and k not in RANK0_OUTPUTS}


def check_init(model, path, saved_sizes, saved_name):
    """--init fixes the model: a model flag given with another value than
    the file's is an error (it used to be ignored). `model`: the model
    flags (the trainer's Model section)."""
    for name in MODEL_FLAGS:
        given = getattr(model, name, None)
        if given is not None and not _same(given, saved_sizes.get(name)):
            raise UsageError("%s %s disagrees with --init %s, whose model has %s (leave the "
                             "model flags out with --init)" % (
                                 _flag(name), given, path, "%s %s" % (
                                     _flag(name), saved_sizes[name]) if name in saved_sizes
                                 else "no %s" % _flag(name)))
    if model.model not in ("cnn", saved_name) and saved_name:
        raise UsageError("--model %s disagrees with --init %s, a %s model" % (
            model.model, path, saved_name))


def reconcile_resume(flags, arrays, header, say):
    """Before a checkpoint is loaded: refuse flags that contradict it; for
    optimizer options given anew, write the new value into the state to be
    loaded; log every flag whose new value takes effect. `flags`: the
    run's as a checkpoint records them (Trainer.recorded_flags)."""
    saved = header.get("config", {})
    for name in FIXED_ON_RESUME:
        if name == "lr_schedule" and flags.lr_schedule is None:
            continue    # not given: resumed_schedule
        if name in saved and not _same(getattr(flags, name, None), saved[name]):
            if name == "model" and flags.init:
                continue    # --init names the model; the trainer took the file's
            raise UsageError("--resume: %s %s differs from the checkpoint's %s (%s); start "
                             "afresh in another --checkpoint-dir to change it" % (
                                 _flag(name), getattr(flags, name), saved[name],
                                 flags.checkpoint_dir))
    done = header.get("epoch", -1) + 1
    if flags.epochs < done:
        raise UsageError("--resume: --epochs %d is below the %d epochs the checkpoint in %s has "
                         "trained: nothing would be trained (give --epochs %d or more)" % (
                             flags.epochs, done, flags.checkpoint_dir, done))
    changed = []
    for name in FOLLOWED_ON_RESUME:
        if name in saved and not _same(getattr(flags, name, None), saved[name]):
            changed.append((name, saved[name], getattr(flags, name)))
    for name in OPTIMIZER_OPTIONS:
        new = getattr(flags, name, None)
        key = "opt/" + (momentum_option(flags.optimizer) if name == "momentum" else name)
        if new is None or key not in arrays or float(arrays[key]) == float(new) \
                or (name == "clip" and flags.model_parallel):   # clipped outside the optimizer
            continue
        if name == "lr" and saved.get("lr") == new:
            continue    # the same --lr as before: the schedule's rate holds
        changed.append((name, float(arrays[key]), new))
        arrays[key] = np.asarray(new, dtype=np.asarray(arrays[key]).dtype)
        if name == "lr":
            header.setdefault("schedule", {})["lr"] = float(new)
    if say:
        from .metrics import kaldi_log
        for name, old, new in changed:
            kaldi_log("resume: %s %s (the checkpoint's was %s) takes effect" % (
                _flag(name), new, old), "setup")


def resumed_schedule(flags, header):
    """The schedule a resumed run trains under when --lr-schedule is not
    given: the one its checkpoint names (a checkpoint written before the
    defaults by N named "constant" for every run), else None (the default
    by N)."""
    if flags.lr_schedule is not None:
        return None
    return header.get("config", {}).get("lr_schedule")


def warn_unused_gpu_ids(gpu_ids, backend_name, main):
    if gpu_ids and backend_name == "numpy" and main:
        warnings.warn("--gpu-ids %s has no effect on the numpy backend" % gpu_ids)
