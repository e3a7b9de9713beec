"""Fixed-length chunks of utterances for truncated BPTT (LSTM training).

Each utterance of length L is cut into ceil(L/T) chunks of T frames; the
tail of the last chunk is padding: zero features and label PAD_LABEL (-1).
The loss therefore needs only `mask = labels >= 0` (or an ignore index of
-1) to skip padding; with drop_partial=True the short tail is dropped and
no padding appears. Chunks never span two utterances.
"""
import numpy as np

from psgd.backend import array_module
from psgd.errors import UsageError

PAD_LABEL = -1


def chunk_utterances(x, y, offsets, chunk_len, drop_partial=False):
    """(chunks (B, T, F), labels (B, T)) from frame-stacked x (N, F), y (N,).

    offsets: (U+1,) host int array of utterance boundaries (Utterances.offsets).
    Chunks come in utterance order, consecutive chunks of one utterance
    consecutive, so a stateful LSTM can carry its state from chunk to chunk.
    """
    if int(chunk_len) != chunk_len or chunk_len < 1:
        raise UsageError("chunk length must be a positive integer, got %r" % (chunk_len,))
    T = int(chunk_len)
    offsets = np.asarray(offsets, dtype=np.int64)
    lengths = np.diff(offsets)
    per_utt = lengths // T if drop_partial else -(-lengths // T)
    utt = np.repeat(np.arange(len(lengths)), per_utt)
    first_chunk = np.cumsum(per_utt) - per_utt
    k = np.arange(len(utt)) - first_chunk[utt]
    rows = (offsets[utt] + k * T)[:, None] + np.arange(T)
    valid = rows < offsets[utt + 1][:, None]
    rows = np.where(valid, rows, 0)

    xp = array_module(x)
    rows_d, valid_d = xp.asarray(rows), xp.asarray(valid)
    chunks = xp.where(valid_d[..., None], x[rows_d], xp.zeros((), dtype=x.dtype))
    yp = array_module(y)
    labels = yp.where(yp.asarray(valid), y[yp.asarray(rows)], PAD_LABEL)
    return chunks, labels
