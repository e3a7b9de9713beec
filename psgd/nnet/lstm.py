"""LSTM over (B, T, F) -> (B, T, H): every frame's output, for frame
classification (Kaldi acoustic-model style) or, with LastFrame, sequences.

Gates are packed (i, f, o, g) so one sigmoid covers the first 3H columns.
The input projection of all T frames is one matmul before the time loop and
the weight gradients are single matmuls after it; only the recurrence itself
steps through time.

Truncated BPTT: a trainer feeds chunks of T frames. With `stateful=True` the
final (h, c) of a training chunk becomes the initial state of the next one
as a constant -- no gradient crosses a chunk boundary. The state resets when
the batch size changes or on `reset_state()`. Evaluation (train=False)
always starts from zeros and leaves the carried training state alone.
"""
import math

from .activations import sigmoid
from .component import Component, fill_uniform


class LSTM(Component):
    kind = "lstm"

    def __init__(self, input_dim, cells, stateful=False):
        super().__init__()
        self.input_dim, self.cells = int(input_dim), int(cells)
        self.stateful = bool(stateful)
        self.reset_state()

    def param_shapes(self):
        h4 = 4 * self.cells
        return [("W", (h4, self.input_dim)), ("U", (h4, self.cells)), ("b", (h4,))]

    def init_params(self, rng):
        limit = 1 / math.sqrt(self.cells)  # PyTorch's LSTM init
        fill_uniform(self.W, rng, limit)
        fill_uniform(self.U, rng, limit)
        self.b[...] = 0
        # forget-gate bias 1: remember by default early in training
        self.b[self.cells:2 * self.cells] = 1

    def output_shape(self, input_shape):
        if input_shape[-1] != self.input_dim:
            raise ValueError("LSTM expects frames of dim %d, got shape %s"
                             % (self.input_dim, tuple(input_shape)))
        return tuple(input_shape[:-1]) + (self.cells,)

    # --- carried state ------------------------------------------------------
    def reset_state(self):
        self._state = None

    def set_state(self, h, c):
        """Start the next training chunk from (h, c), each (B, H)."""
        self._state = (self.xp.array(h, dtype=self.dtype), self.xp.array(c, dtype=self.dtype))

    def get_state(self):
        return self._state

    def _initial(self, b, train):
        if train and self._state is not None and self._state[0].shape[0] == b:
            return self._state
        zeros = self.xp.zeros((b, self.cells), dtype=self.dtype)
        return zeros, zeros

    # --- compute --------------------------------------------------------------
    def propagate(self, x, train=True):
        xp = self.xp
        b, t, f = x.shape
        h = self.cells
        self._x = x.reshape(b * t, f)
        xw = (self._x @ self.W.T + self.b).reshape(b, t, 4 * h)
        hs = xp.empty((b, t + 1, h), dtype=x.dtype)
        cs = xp.empty((b, t + 1, h), dtype=x.dtype)
        tc = xp.empty((b, t, h), dtype=x.dtype)
        gates = xp.empty((b, t, 4 * h), dtype=x.dtype)
        hs[:, 0], cs[:, 0] = self._initial(b, train)
        ut = self.U.T
        for s in range(t):
            z = xw[:, s] + hs[:, s] @ ut
            a = gates[:, s]
            a[:, :3 * h] = sigmoid(xp, z[:, :3 * h])
            a[:, 3 * h:] = xp.tanh(z[:, 3 * h:])
            c = cs[:, s + 1]
            xp.multiply(a[:, h:2 * h], cs[:, s], out=c)
            c += a[:, :h] * a[:, 3 * h:]
            xp.tanh(c, out=tc[:, s])
            xp.multiply(a[:, 2 * h:3 * h], tc[:, s], out=hs[:, s + 1])
        if train and self.stateful:
            self._state = (hs[:, t].copy(), cs[:, t].copy())
        self._hs, self._cs, self._tc, self._gates = hs, cs, tc, gates
        return hs[:, 1:]

    def backpropagate(self, dy):
        xp = self.xp
        b, t, h = dy.shape
        a_all, cs, tc_all = self._gates, self._cs, self._tc
        # d(activation)/dz for all steps at once: sigmoid' = a(1-a), tanh' = 1-a^2
        gd = a_all * (1 - a_all)
        gd[..., 3 * h:] = 1 - a_all[..., 3 * h:] ** 2
        dz = xp.empty((b, t, 4 * h), dtype=dy.dtype)
        dh = xp.zeros((b, h), dtype=dy.dtype)
        dc = xp.zeros((b, h), dtype=dy.dtype)
        for s in range(t - 1, -1, -1):
            a, tc, d = a_all[:, s], tc_all[:, s], dz[:, s]
            dh += dy[:, s]
            dc += dh * a[:, 2 * h:3 * h] * (1 - tc * tc)
            xp.multiply(dc, a[:, 3 * h:], out=d[:, :h])            # i
            xp.multiply(dc, cs[:, s], out=d[:, h:2 * h])            # f
            xp.multiply(dh, tc, out=d[:, 2 * h:3 * h])              # o
            xp.multiply(dc, a[:, :h], out=d[:, 3 * h:])             # g
            d *= gd[:, s]
            dc *= a[:, h:2 * h]
            dh = d @ self.U
        dz2 = dz.reshape(b * t, 4 * h)
        xp.matmul(dz2.T, self._x, out=self.dW)
        xp.matmul(dz2.T, self._hs[:, :t].reshape(b * t, h), out=self.dU)
        xp.sum(dz2, axis=0, out=self.db)
        return (dz2 @ self.W).reshape(b, t, self.input_dim)

    def __repr__(self):
        return "LSTM(%d, %d%s)" % (self.input_dim, self.cells,
                                   ", stateful" if self.stateful else "")
