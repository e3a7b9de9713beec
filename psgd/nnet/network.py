"""Network: a stack of components over three flat buffers.

What the trainer uses (the whole interface):

    net = Network(components, xp=np, dtype=np.float32, seed=0)
    net.param_buffer, net.grad_buffer   FlatBuffers; .data is the 1-D array an
                                        optimizer steps and an algorithm syncs
    net.params, net.grads               per-tensor views into them (same order)
    net.param_names                     unique names, "2.affine.W"
    net.stat_buffer                     FlatBuffer of non-trained stats (BatchNorm
                                        running mean/var; size 0 if none) to average
    loss = net.loss_and_grad(x, y, loss="ce")   forward (train), loss, backward;
                                        grads overwritten; loss is a 0-d array
    net.predict(x, batch_size=1024)     eval-mode outputs (probabilities with Softmax)
    net.evaluate(x, y, batch_size=256, loss="ce") -> (mean loss, accuracy) floats
    net.state_dict() / load_state_dict(d)   {name: numpy array}, params and stats
    net.rebind(param_views, grad_views=None)  train on views of another flat buffer
    net.reset_state()                   clear LSTM state carried between chunks
    net.reseed(seed)                    restart Dropout mask streams (seed + rank
                                        gives each worker its own masks)

Cross-entropy works on logits: under loss "ce" a final Softmax component is
skipped in training and evaluation (the joint softmax-cross-entropy is the
stable form), while `predict` applies it.
"""
import numpy as np

from ..backend import to_numpy
from ..buffers import FlatBuffer
from ..errors import UsageError
from .loss import count_correct, get_loss


class Network:
    def __init__(self, components, xp=np, dtype=np.float32, seed=0):
        self.components = list(components)
        self.xp = xp
        self.dtype = np.dtype(dtype)
        names, shapes, owners = [], [], []
        stat_names, stat_shapes = [], []
        for i, comp in enumerate(self.components):
            comp.setup(xp, self.dtype)
            for pname, shape in comp.param_shapes():
                names.append("%d.%s.%s" % (i, comp.kind, pname))
                shapes.append(tuple(shape))
                owners.append(i)
            for sname, shape in comp.stat_shapes():
                stat_names.append("%d.%s.%s" % (i, comp.kind, sname))
                stat_shapes.append(tuple(shape))
        self.param_names = names
        self.stat_names = stat_names
        self._owners = owners
        self.param_buffer = FlatBuffer.allocate(shapes, self.dtype, xp)
        self.grad_buffer = FlatBuffer.allocate(shapes, self.dtype, xp)
        self.stat_buffer = FlatBuffer.allocate(stat_shapes, self.dtype, xp)
        self._bind(self.param_buffer.views, self.grad_buffer.views)
        offset = 0
        for comp in self.components:
            n = len(comp.stat_shapes())
            comp.bind_stats(self.stat_buffer.views[offset:offset + n])
            comp.init_stats()
            offset += n
        rng = np.random.default_rng(seed)
        for comp in self.components:
            comp.init_params(rng)

    # --- buffers --------------------------------------------------------------
    @property
    def params(self):
        return self.param_buffer.views

    @property
    def grads(self):
        return self.grad_buffer.views

    @property
    def num_params(self):
        return self.param_buffer.size

    def _bind(self, params, grads):
        for i, comp in enumerate(self.components):
            sel = [k for k, owner in enumerate(self._owners) if owner == i]
            comp.bind([params[k] for k in sel], [grads[k] for k in sel])

    def rebind(self, param_views, grad_views=None):
        """Compute with `param_views` (and `grad_views`): consecutive views of
        another flat buffer with this network's layout, e.g. an algorithm's.
        The network adopts those buffers; the values are not copied."""
        param_buffer = self._adopt(param_views, "parameter")
        grad_buffer = (self.grad_buffer if grad_views is None
                       else self._adopt(grad_views, "gradient"))
        self.param_buffer, self.grad_buffer = param_buffer, grad_buffer
        self._bind(param_buffer.views, grad_buffer.views)

    def _adopt(self, views, what):
        views = list(views)
        want = self.param_buffer.shapes
        got = [tuple(v.shape) for v in views]
        if got != want:
            raise UsageError("rebind: %s views have shapes %s, the network needs %s"
                             % (what, got, want))
        if any(v.dtype != self.dtype for v in views):
            raise UsageError("rebind: %s views must be %s" % (what, self.dtype))
        buf = FlatBuffer.wrap(views)
        if views and not all(_same_memory(a, b) for a, b in zip(buf.views, views)):
            raise UsageError("rebind: %s views must be consecutive views of one flat "
                             "buffer (FlatBuffer.views)" % what)
        return buf

    # --- compute --------------------------------------------------------------
    def propagate(self, x, train=True, upto=None):
        x = self.xp.asarray(x, dtype=self.dtype)
        for comp in self.components[:upto]:
            x = comp.propagate(x, train)
        return x

    def backpropagate(self, dy, upto=None):
        for comp in reversed(self.components[:upto]):
            dy = comp.backpropagate(dy)
        return dy

    def _loss_end(self, loss):
        """How many components the loss sees the output of (skip a final Softmax
        when the loss takes logits)."""
        last = self.components[-1] if self.components else None
        if loss.takes_logits and last is not None and last.kind == "softmax":
            return len(self.components) - 1
        return None

    def loss_and_grad(self, x, y, loss="ce"):
        """One training step's forward and backward; fills the grad buffer."""
        crit = get_loss(loss, self.xp)
        end = self._loss_end(crit)
        out = self.propagate(x, train=True, upto=end)
        value, dout = crit.value_and_grad(out, y)
        self.backpropagate(dout, upto=end)
        return value

    def predict(self, x, batch_size=1024):
        """Eval-mode outputs for all of `x`, in batches of `batch_size`."""
        n = len(x)
        step = batch_size or max(n, 1)
        outs = [self.propagate(x[i:i + step], train=False) for i in range(0, n, step)]
        return outs[0] if len(outs) == 1 else self.xp.concatenate(outs)

    def evaluate(self, x, y, batch_size=256, loss="ce"):
        """(mean loss per frame, accuracy) over all of `x` in eval mode."""
        xp = self.xp
        crit = get_loss(loss, xp)
        end = self._loss_end(crit)
        total, correct, counted, frames = 0.0, 0, 0, 0
        for i in range(0, len(x), batch_size):
            out = self.propagate(x[i:i + batch_size], train=False, upto=end)
            yb = xp.asarray(y[i:i + batch_size])
            value, _ = crit.value_and_grad(out, yb)
            c, k = count_correct(xp, out, yb)
            # the loss is a mean over counted frames: weight batches by that count
            weight = k if k else out.size // out.shape[-1]
            total += float(value) * weight
            frames += weight
            correct += c
            counted += k
        return (total / frames if frames else float("nan"),
                correct / counted if counted else float("nan"))

    def reset_state(self):
        for comp in self.components:
            if hasattr(comp, "reset_state"):
                comp.reset_state()

    def reseed(self, seed):
        """Restart the random streams of components that draw during training
        (Dropout masks) from `seed`, without touching any parameter."""
        rng = np.random.default_rng(seed)
        for comp in self.components:
            if hasattr(comp, "reseed"):
                comp.reseed(int(rng.integers(2 ** 63)))

    # --- checkpoints ----------------------------------------------------------
    def state_dict(self):
        """{name: numpy copy} of every parameter and stat."""
        out = {n: to_numpy(v, copy=True) for n, v in zip(self.param_names, self.params)}
        out.update({n: to_numpy(v, copy=True) for n, v in zip(self.stat_names, self.stat_buffer.views)})
        return out

    def load_state_dict(self, state):
        """Copy `state` into the views; names and shapes must match exactly."""
        names = self.param_names + self.stat_names
        views = list(self.params) + list(self.stat_buffer.views)
        missing = [n for n in names if n not in state]
        extra = [n for n in state if n not in set(names)]
        if missing or extra:
            raise UsageError("state does not fit this network: missing %s, unexpected %s"
                             % (missing or "none", extra or "none"))
        for name, view in zip(names, views):
            shape = tuple(np.shape(state[name]))
            if shape != tuple(view.shape):
                raise UsageError("state %r has shape %s, the network needs %s"
                                 % (name, shape, tuple(view.shape)))
        for name, view in zip(names, views):
            view[...] = self.xp.asarray(state[name], dtype=self.dtype)

    def __repr__(self):
        inner = ",\n  ".join(repr(c) for c in self.components)
        return "Network(%d params,\n  %s)" % (self.num_params, inner)


def _same_memory(a, b):
    if a.size == 0:
        return True
    if isinstance(a, np.ndarray):
        return a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
    return a.data.ptr == b.data.ptr
