"""Flags that would change nothing, judged by what only this rank can see
(its backend, the --init file it reads): refused in one line at start-up,
before the data is read, through the start-up agreement so that every rank
stops (flags judged by the command line alone: options.py)."""
import warnings

from .. import settings
from ..errors import UsageError
from .consistency import MODEL_FLAGS
from .model_files import is_npz


def refuse_idle_flags(config, backend_name):
    runtime, model = config.runtime, config.model
    if runtime.cuda_aware in ("yes", "no") and backend_name == "numpy":
        what = "--cuda-aware %s applies to GPU buffers (the cupy backend); this rank's " \
               "backend is numpy" % runtime.cuda_aware
        if (runtime.backend or settings.get("PSGD_BACKEND")) == "numpy":
            raise UsageError(what)
        # the auto backend found no GPU here: one launch script serves CPU and
        # GPU hosts alike, as with --gpu-ids
        warnings.warn(what + " (the auto backend found no GPU)")
    given = [name for name in MODEL_FLAGS if getattr(model, name) is not None]
    if model.init and given and not is_npz(model.init):
        raise UsageError("--%s changes nothing with --init %s: a Kaldi nnet1 model's layers "
                         "fix the model (leave the model flags out with --init)" % (
                             given[0].replace("_", "-"), model.init))
