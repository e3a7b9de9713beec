"""What nnet-forward computes for one utterance: the feature transform, the
network (evaluation mode, so Dropout is the identity), log-posteriors, and
with class priors the pseudo log-likelihoods a decoder takes.

A network that ends in Softmax gives log-posteriors as the log-softmax of
its pre-softmax outputs (the stable form of log(softmax)); a network
without one is taken to output logits and gets the same log-softmax.
"""
import numpy as np

from psgd.backend import to_numpy
from psgd.errors import UsageError


def _log_softmax(z):
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def log_posteriors(net, frames, transform=None, batch_size=4096):
    """(T, classes) float32 log-posteriors of one utterance's raw frames."""
    x = transform.apply(frames) if transform is not None else np.asarray(frames, np.float32)
    last = net.components[-1] if net.components else None
    upto = -1 if last is not None and last.kind == "softmax" else None
    outs = []
    for i in range(0, len(x), batch_size):
        z = net.propagate(x[i:i + batch_size], train=False, upto=upto)
        outs.append(np.asarray(to_numpy(z), dtype=np.float64))
    z = np.concatenate(outs) if outs else np.zeros((0, 0))
    return _log_softmax(z).astype(np.float32)


def pseudo_log_likelihoods(log_post, log_priors, prior_scale=1.0):
    """log p(x|s) + const = log p(s|x) - scale * log p(s), as nnet-forward does."""
    if log_post.shape[-1] != len(log_priors):
        raise UsageError("the model has %d outputs but the class frame counts %d classes"
                         % (log_post.shape[-1], len(log_priors)))
    return (log_post - np.float32(prior_scale) * log_priors).astype(np.float32)
