"""Kaldi's Splice: each frame with its K left and K right neighbours.

Row t of the output is [x[t-K], ..., x[t], ..., x[t+K]] concatenated (2K+1
blocks of F). At utterance edges the first/last frame is repeated, as in
Kaldi, so context never leaks from one utterance into the next.
"""
import numpy as np

from psgd.backend import array_module
from psgd.errors import UsageError


def splice_frames(x, offsets, context):
    """Splice frame-stacked features x (N, F) whose utterances end at `offsets`.

    offsets: (U+1,) host int array, utterance u owning rows offsets[u]:offsets[u+1].
    Returns (N, (2K+1)*F) in x's dtype and array module; context 0 returns x.
    """
    if int(context) != context or context < 0:
        raise UsageError("splice context must be an integer >= 0, got %r" % (context,))
    context = int(context)
    if context == 0:
        return x
    xp = array_module(x)
    offsets = np.asarray(offsets, dtype=np.int64)
    lengths = np.diff(offsets)
    first = np.repeat(offsets[:-1], lengths)
    last = np.repeat(offsets[1:] - 1, lengths)
    rows = np.arange(x.shape[0], dtype=np.int64)[:, None] + np.arange(-context, context + 1)
    rows = np.clip(rows, first[:, None], last[:, None])
    return x[xp.asarray(rows)].reshape(x.shape[0], (2 * context + 1) * x.shape[1])
