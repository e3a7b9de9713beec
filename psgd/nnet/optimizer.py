"""Base of the local optimizers: whole-buffer steps on 1-D arrays.

`step(w, g)` updates the flat parameter array `w` in place from the flat
gradient `g` -- the network's param_buffer.data and grad_buffer.data -- so
an update is a handful of vectorised passes, never a loop over tensors.
`g` is scratch: gradient clipping and weight decay are applied to it in
place (the next backward pass overwrites it anyway).

Options are attributes (`opt.lr = 0.5 * opt.lr` is a learning-rate
schedule). State arrays (momentum, moment estimates) are allocated on the first step,
on w's device and dtype. `reset()` clears them (bmuf's reset_local_state);
`state_dict()` holds host copies and scalars for checkpoints.

A fused numexpr path was measured and left out: on this project's 2-core
host it was 2-4x slower than the in-place NumPy passes below for float32
buffers of 2e4-4e6 elements (adam: 0.78 ms NumPy vs 2.0-2.8 ms numexpr at
3.4e5; 14.6 ms vs 17-36 ms at 4e6). On a GPU, fused CuPy kernels do adam
and momentum in one pass (fused.py).
"""
import math

import numpy as np

from ..backend import array_module, to_numpy
from ..errors import UsageError


def _module_of(array):
    return array_module(array)


class Optimizer:
    """Subclasses set `name`, `defaults` (their own options, lr included),
    `slots` (state array names), `scratch` (temporary arrays they need) and
    implement `_update(xp, w, g)`."""

    name = None
    defaults = {}
    slots = ()
    momentum_term = "momentum"  # the option the trainer's --momentum sets
    scratch = 1
    common = {"lr": None, "weight_decay": 0.0, "clip": 0.0, "clip_value": 0.0}

    def __init__(self, **options):
        opts = dict(self.common)
        opts.update(self.defaults)
        unknown = sorted(set(options) - set(opts))
        if unknown:
            raise UsageError("optimizer %r does not take %s; its options: %s"
                             % (self.name, ", ".join(unknown), ", ".join(sorted(opts))))
        opts.update({k: v for k, v in options.items() if v is not None})
        for key, value in opts.items():
            opts[key] = _number(self.name, key, value)
        self.options = opts
        for key, value in opts.items():
            setattr(self, key, value)
        self._validate()
        self.reset()

    def _validate(self):
        checks = {
            "lr": (self.lr > 0, "> 0"),
            "weight_decay": (self.weight_decay >= 0, ">= 0"),
            "clip": (self.clip >= 0, ">= 0 (0 disables)"),
            "clip_value": (self.clip_value >= 0, ">= 0 (0 disables)"),
        }
        for key in ("momentum", "rho", "beta1", "beta2"):
            if key in self.options:
                checks[key] = (0 <= self.options[key] < 1, "in [0, 1)")
        if "eps" in self.options:
            checks["eps"] = (self.eps > 0, "> 0")
        for key, (ok, rule) in checks.items():
            if not ok:
                raise UsageError("optimizer %s: %s must be %s, got %r"
                                 % (self.name, key, rule, self.options[key]))

    # --- the step ---------------------------------------------------------------
    def step(self, w, g):
        xp = _module_of(w)
        if w.shape != g.shape or w.ndim != 1:
            raise ValueError("step needs 1-D w and g of one size, got %s and %s"
                             % (w.shape, g.shape))
        self._ensure_state(xp, w)
        self._prepare(xp, w, g)
        self.t += 1
        self._update(xp, w, g)

    def _prepare(self, xp, w, g):
        """Clipping on the raw gradient, then L2 weight decay (PyTorch's order:
        clip_grad_norm_ before optimizer.step, which adds wd * w)."""
        if self.clip_value:
            xp.clip(g, -self.clip_value, self.clip_value, out=g)
        if self.clip:
            norm = xp.sqrt(xp.dot(g, g))
            if xp is np:
                if norm > self.clip:
                    g *= self.clip / norm
            else:  # scale on the device: no host round trip per step
                g *= xp.minimum(1, self.clip / (norm + 1e-30)).astype(g.dtype)
        if self.weight_decay:
            self._axpy(xp, self.weight_decay, w, g)

    def _axpy(self, xp, a, x, y):
        """y += a * x with a reused scratch buffer (no allocation per step)."""
        xp.multiply(x, a, out=self._tmp[0])
        y += self._tmp[0]

    def _update(self, xp, w, g):
        raise NotImplementedError

    # --- state --------------------------------------------------------------------
    def _ensure_state(self, xp, w):
        tmp = self._tmp
        if tmp is None or tmp[0].shape != w.shape or _module_of(tmp[0]) is not xp:
            if tmp is not None and self.t:
                raise ValueError("optimizer state is for %d elements, got %d; reset() first"
                                 % (tmp[0].size, w.size))
            self._tmp = [xp.empty_like(w) for _ in range(self.scratch)]
            loaded, self._loaded = self._loaded, None
            for slot in self.slots:
                if loaded is None:
                    init = xp.zeros_like(w)
                elif loaded[slot].shape != w.shape:
                    raise UsageError("optimizer state %r has shape %s, parameters have %s"
                                     % (slot, loaded[slot].shape, w.shape))
                else:
                    init = xp.asarray(loaded[slot], dtype=w.dtype)
                setattr(self, slot, init)

    def reset(self):
        """Forget all accumulated state (momentum, moments, step count)."""
        self.t = 0
        self._tmp = None
        self._loaded = None
        for slot in self.slots:
            setattr(self, slot, None)

    def state_dict(self):
        state = {"name": self.name, "t": self.t}
        # attributes, not self.options: a schedule may have assigned opt.lr
        state.update({k: float(getattr(self, k)) for k in self.options})
        for slot in self.slots:
            value = getattr(self, slot)
            if value is None and self._loaded is not None:
                value = self._loaded[slot]
            state[slot] = None if value is None else to_numpy(value, copy=True)
        return state

    def load_state_dict(self, state):
        if state.get("name") != self.name:
            raise UsageError("optimizer state is for %r, this optimizer is %r"
                             % (state.get("name"), self.name))
        present = [s for s in self.slots if state.get(s) is not None]
        if present and len(present) != len(self.slots):
            raise UsageError("optimizer state for %r lacks %s"
                             % (self.name, sorted(set(self.slots) - set(present))))
        self.reset()
        self.t = int(state["t"])
        for key in self.options:
            if key in state:
                self.options[key] = _number(self.name, key, state[key])
                setattr(self, key, self.options[key])
        # state arrays move to w's device on the next step
        self._loaded = {s: np.asarray(state[s]) for s in present} if present else None

    def __repr__(self):
        opts = ", ".join("%s=%g" % kv for kv in sorted(self.options.items()))
        return "%s(%s)" % (type(self).__name__, opts)


def _number(opt_name, key, value):
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise UsageError("optimizer %s: %s must be a number, got %r" % (opt_name, key, value))
    if math.isnan(value):
        raise UsageError("optimizer %s: %s must be a number, got nan" % (opt_name, key))
    return value
