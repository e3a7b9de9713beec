"""Training criteria: `value_and_grad(outputs, targets) -> (mean loss, doutputs)`.

Outputs are (..., K): any leading axes are frames (B, or B x T for frame
classification). Targets are either integer class labels of shape (...)
-- a label < 0 marks a frame to ignore (padding) -- or dense targets of the
output's shape (one-hot or soft). The loss is the mean over counted frames
and the gradient is that of the mean, so learning rates do not depend on
batch size. The loss comes back as a 0-d array: float() it when you need the
number (on a GPU that waits for the device).
"""
from ..errors import UsageError


def _frames(outputs):
    k = outputs.shape[-1]
    return outputs.reshape(-1, k), k


def _labels(xp, outputs, targets):
    """Flat int labels, their validity mask (as dtype) and the valid count."""
    labels = targets.reshape(-1)
    if labels.shape[0] * outputs.shape[-1] != outputs.size:
        raise UsageError("targets of shape %s do not match outputs of shape %s"
                         % (tuple(targets.shape), tuple(outputs.shape)))
    valid = labels >= 0
    return xp.where(valid, labels, 0), valid.astype(outputs.dtype), valid.sum()


def _is_dense(outputs, targets):
    if targets.shape == outputs.shape and targets.dtype.kind == "f":
        return True
    if targets.dtype.kind not in "iu":
        raise UsageError("targets must be integer labels of shape %s or floats of shape %s, "
                         "got %s %s" % (tuple(outputs.shape[:-1]), tuple(outputs.shape),
                                        targets.dtype, tuple(targets.shape)))
    return False


class CrossEntropy:
    """Softmax + cross-entropy on logits, computed jointly: log-softmax by the
    max shift, gradient softmax - target (no division by a probability)."""

    name = "ce"
    #: the network skips a final Softmax component under this loss
    takes_logits = True

    def __init__(self, xp):
        self.xp = xp

    def value_and_grad(self, logits, targets):
        xp = self.xp
        targets = xp.asarray(targets)
        z, k = _frames(logits)
        z = z - z.max(axis=1, keepdims=True)
        lse = xp.log(xp.exp(z).sum(axis=1, keepdims=True))
        logp = z - lse
        grad = xp.exp(logp)
        if _is_dense(logits, targets):
            t = targets.reshape(-1, k).astype(logits.dtype, copy=False)
            n = z.shape[0]
            loss = -(t * logp).sum() / max(n, 1)
            grad *= t.sum(axis=1, keepdims=True)
            grad -= t
            grad /= max(n, 1)
        else:
            labels, valid, count = _labels(xp, logits, targets)
            rows = xp.arange(z.shape[0])
            count = xp.maximum(count, 1).astype(logits.dtype)
            loss = -(logp[rows, labels] * valid).sum() / count
            grad[rows, labels] -= 1
            grad *= (valid / count)[:, None]
        return loss, grad.reshape(logits.shape)


class MSE:
    """Kaldi's Mse: 0.5 * ||y - t||^2 per frame, averaged over frames.
    Integer labels are compared as one-hot vectors."""

    name = "mse"
    takes_logits = False

    def __init__(self, xp):
        self.xp = xp

    def value_and_grad(self, outputs, targets):
        xp = self.xp
        targets = xp.asarray(targets)
        y, k = _frames(outputs)
        if _is_dense(outputs, targets):
            diff = y - targets.reshape(-1, k).astype(outputs.dtype, copy=False)
            count = max(y.shape[0], 1)
        else:
            labels, valid, count = _labels(xp, outputs, targets)
            diff = y.copy()
            diff[xp.arange(y.shape[0]), labels] -= 1
            diff *= valid[:, None]
            count = xp.maximum(count, 1).astype(outputs.dtype)
        loss = 0.5 * (diff * diff).sum() / count
        diff /= count
        return loss, diff.reshape(outputs.shape)


LOSSES = {"ce": CrossEntropy, "mse": MSE}


def get_loss(name, xp):
    try:
        return LOSSES[name](xp)
    except KeyError:
        raise UsageError("unknown loss %r; valid: %s" % (name, ", ".join(sorted(LOSSES))))


def count_correct(xp, outputs, targets):
    """(correct, counted) frames by argmax; ignored labels (< 0) not counted."""
    targets = xp.asarray(targets)
    pred = outputs.reshape(-1, outputs.shape[-1]).argmax(axis=1)
    if _is_dense(outputs, targets):
        truth = targets.reshape(pred.shape[0], -1).argmax(axis=1)
        return int((pred == truth).sum()), int(pred.shape[0])
    labels = targets.reshape(-1)
    valid = labels >= 0
    return int(((pred == labels) & valid).sum()), int(valid.sum())

