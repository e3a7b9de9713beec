"""Large effective batch: N workers that average every few minibatches, or
average gradients every minibatch, step like one worker with an N times
larger batch, so they need a larger rate for the same progress per sample.

    linear rule (SGD-family optimizers; Goyal et al. 2017):   lr_N = N * lr
    square-root rule (adaptive ones: Adam, RMSProp, AdaGrad):  lr_N = sqrt(N) * lr
    gradual warm-up over W epochs: epoch e (from 0) trains at
        lr * (1 + (k - 1) * min(1, (e + 1) / (W + 1))),   k = lr_N / lr
    so the first epoch is already above lr and epoch W reaches lr_N
    (Goyal et al. ramp per iteration over 5 epochs; here the rate changes
    at epoch boundaries, where the trainer sets it).

Which algorithms get it, and W, are the trainer's defaults (defaults.py).
"""
import math

ADAPTIVE = ("adam", "rmsprop", "adagrad", "adadelta")


def scale_factor(optimizer, num_workers):
    """k: the rule's factor for `num_workers` workers."""
    if num_workers <= 1:
        return 1.0
    return math.sqrt(num_workers) if optimizer in ADAPTIVE else float(num_workers)


def rule_name(optimizer):
    return "square-root" if optimizer in ADAPTIVE else "linear"


def warmup_factor(epoch, k, warmup_epochs):
    """The fraction of the scaled rate lr_N that epoch `epoch` trains at."""
    if k == 1.0 or warmup_epochs <= 0:
        return 1.0
    ramp = min(1.0, (epoch + 1) / (warmup_epochs + 1))
    return (1.0 + (k - 1.0) * ramp) / k
