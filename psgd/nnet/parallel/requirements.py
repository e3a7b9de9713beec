"""What N ranks need to run a network hybrid (neon's multi-GPU rules), and
the one-line error naming the largest N that would work.

- Data-parallel layers split the global minibatch: it must be a multiple of N.
- Every hidden fully connected layer is sliced by output units: its width
  must be a multiple of N.
- The output (logits) layer is exempt, unlike in neon: it is sliced when N
  divides the class count and otherwise computed whole on every rank (the
  "replicated" layer: its inputs are gathered anyway, its gradient is
  identical on every rank, and K x H is small next to the hidden layers).
  The default MNIST-1D model has 10 classes, so np 2 and 5 slice it while
  np 3 and 4 replicate it.

So N works exactly when it divides GCD(minibatch, hidden widths).
"""
import math

from ...errors import UsageError


def largest_ranks(minibatch, hidden):
    """The largest N the rules allow (minibatch None: not checked)."""
    values = list(hidden) + ([minibatch] if minibatch is not None else [])
    return math.gcd(*values) if values else None


def logits_sliced(num_outputs, size):
    """Whether the output layer is sliced on `size` ranks (else replicated)."""
    return num_outputs % size == 0


def check(size, hidden, minibatch=None):
    """Raise UsageError unless `size` ranks can run a network whose hidden FC
    layers have `hidden` output units with a global `minibatch`."""
    hidden = [int(h) for h in hidden]
    bad_batch = minibatch is not None and minibatch % size != 0
    bad_layers = [h for h in hidden if h % size]
    if not bad_batch and not bad_layers:
        return
    needs = []
    if bad_batch:
        needs.append("the global minibatch (%d)" % minibatch)
    if bad_layers:
        needs.append("the output units of every hidden fully connected layer (%s)"
                     % ", ".join(map(str, bad_layers)))
    parts = (["minibatch %d" % minibatch] if minibatch is not None else []) + \
        (["hidden %s" % ",".join(map(str, hidden))] if hidden else [])
    best = largest_ranks(minibatch, hidden)
    gcd = "GCD(%s) = %d" % ("; ".join(parts), best)
    if best <= size:
        hint = "at most %d rank%s (%s)" % (best, "s" if best > 1 else "", gcd)
    else:
        below = max(d for d in range(1, size) if best % d == 0)
        hint = "N ranks work when N divides %s (at most %d; the largest below %d is %d)" % (
            gcd, best, size, below)
    raise UsageError("--model-parallel on %d ranks needs %s to be multiples of %d: %s"
                     % (size, " and ".join(needs), size, hint))
