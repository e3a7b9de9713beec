"""Large effective batch: N workers that average every few minibatches, or
average gradients every minibatch, step like one worker with an N times
larger batch, so they need a larger rate for the same progress per sample.

    linear rule (SGD-family optimizers; Goyal et al. 2017):   lr_N = N * lr
    square-root rule (adaptive ones: Adam, RMSProp, AdaGrad):  lr_N = sqrt(N) * lr
      or, with a linear start, lr_N = max(sqrt(N), min(N, 3)) * lr: linear
      up to 3x (N = 2, 3), then 3x until sqrt(N) passes it (N > 9)
    gradual warm-up over W epochs: epoch e (from 0) trains at
        lr * (1 + (k - 1) * min(1, (e + 1) / (W + 1))),   k = lr_N / lr
    so the first epoch is already above lr and epoch W reaches lr_N
    (Goyal et al. ramp per iteration over 5 epochs; here the rate changes
    at epoch boundaries, where the trainer sets it).

Which algorithms get it, and W, are the trainer's defaults (defaults.py).
"""
import math

ADAPTIVE = ("adam", "rmsprop", "adagrad", "adadelta")


LINEAR_START_UP_TO = 3.0


def scale_factor(optimizer, num_workers, linear_start=False, linear=False):
    """k: the rule's factor for `num_workers` workers; `linear`: the linear
    rule whatever the optimizer."""
    if num_workers <= 1:
        return 1.0
    if linear or optimizer not in ADAPTIVE:
        return float(num_workers)
    root = math.sqrt(num_workers)
    return max(root, min(float(num_workers), LINEAR_START_UP_TO)) if linear_start else root


def rule_name(optimizer, linear_start=False, linear=False):
    if linear or optimizer not in ADAPTIVE:
        return "linear"
    return ("linear to %gx, then square-root" % LINEAR_START_UP_TO if linear_start
            else "square-root")


def warmup_factor(epoch, k, warmup_epochs):
    """The fraction of the scaled rate lr_N that epoch `epoch` trains at."""
    if k == 1.0 or warmup_epochs <= 0:
        return 1.0
    ramp = min(1.0, (epoch + 1) / (warmup_epochs + 1))
    return (1.0 + (k - 1.0) * ramp) / k
