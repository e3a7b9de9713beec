"""Local optimizers against their textbook updates, written out here."""
import numpy as np
import pytest

from psgd.errors import UsageError
from psgd.nnet import OPTIMIZERS, create_optimizer


class Reference:
    """Independent per-step formulas (PyTorch's documented algorithms)."""

    def __init__(self, name, **o):
        self.name, self.o, self.t, self.s = name, o, 0, {}

    def step(self, w, g):
        o, s = self.o, self.s
        g = g.copy()
        if o.get("clip_value"):
            g = np.clip(g, -o["clip_value"], o["clip_value"])
        if o.get("clip"):
            norm = np.sqrt(np.sum(g ** 2))
            g = g * min(1.0, o["clip"] / norm)
        g = g + o.get("weight_decay", 0.0) * w
        self.t += 1
        lr = o["lr"]
        zero = np.zeros_like(w)
        if self.name == "sgd":
            return w - lr * g
        if self.name in ("momentum", "nesterov"):
            mu = o["momentum"]
            s["v"] = mu * s.get("v", zero) + g
            return w - lr * (g + mu * s["v"] if self.name == "nesterov" else s["v"])
        if self.name == "adagrad":
            s["sum"] = s.get("sum", zero) + g * g
            return w - lr * g / (np.sqrt(s["sum"]) + o["eps"])
        if self.name == "adadelta":
            rho, eps = o["rho"], o["eps"]
            s["sq"] = rho * s.get("sq", zero) + (1 - rho) * g * g
            delta = np.sqrt(s.get("acc", zero) + eps) / np.sqrt(s["sq"] + eps) * g
            s["acc"] = rho * s.get("acc", zero) + (1 - rho) * delta * delta
            return w - lr * delta
        if self.name == "rmsprop":
            s["sq"] = o["rho"] * s.get("sq", zero) + (1 - o["rho"]) * g * g
            step = g / (np.sqrt(s["sq"]) + o["eps"])
            if o.get("momentum"):
                s["buf"] = o["momentum"] * s.get("buf", zero) + step
                step = s["buf"]
            return w - lr * step
        if self.name == "adam":
            b1, b2 = o["beta1"], o["beta2"]
            s["m"] = b1 * s.get("m", zero) + (1 - b1) * g
            s["v"] = b2 * s.get("v", zero) + (1 - b2) * g * g
            m_hat = s["m"] / (1 - b1 ** self.t)
            v_hat = s["v"] / (1 - b2 ** self.t)
            return w - lr * m_hat / (np.sqrt(v_hat) + o["eps"])
        raise AssertionError(self.name)


CASES = [
    ("sgd", {"lr": 0.1}),
    ("momentum", {"lr": 0.05, "momentum": 0.9}),
    ("nesterov", {"lr": 0.05, "momentum": 0.8}),
    ("adagrad", {"lr": 0.1, "eps": 1e-10}),
    ("adadelta", {"lr": 1.0, "rho": 0.9, "eps": 1e-6}),
    ("rmsprop", {"lr": 0.01, "rho": 0.99, "eps": 1e-8}),
    ("rmsprop", {"lr": 0.01, "rho": 0.9, "eps": 1e-8, "momentum": 0.5}),
    ("adam", {"lr": 0.01, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8}),
]
EXTRAS = [{}, {"weight_decay": 0.1}, {"clip": 0.5}, {"clip_value": 0.3, "weight_decay": 0.01}]


def _gradients(n, steps, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(n) for _ in range(steps)]


@pytest.mark.parametrize("extra", EXTRAS, ids=["plain", "wd", "clip", "clipvalue"])
@pytest.mark.parametrize("name,opts", CASES, ids=[c[0] + str(i) for i, c in enumerate(CASES)])
def test_matches_textbook_update(name, opts, extra):
    opts = dict(opts, **extra)
    opt, ref = create_optimizer(name, **opts), Reference(name, **opts)
    w = np.random.default_rng(1).standard_normal(50)
    w_ref = w.copy()
    for g in _gradients(50, 6):
        opt.step(w, g.copy())
        w_ref = ref.step(w_ref, g)
        np.testing.assert_allclose(w, w_ref, rtol=1e-12, atol=1e-14)


def test_float32_buffers_stay_float32():
    for name in OPTIMIZERS:
        opt = create_optimizer(name, weight_decay=0.01, clip=1.0)
        w = np.ones(10, np.float32)
        opt.step(w, np.full(10, 0.5, np.float32))
        assert w.dtype == np.float32 and np.all(np.isfinite(w)) and np.all(w != 1)


@pytest.mark.parametrize("name", [n for n in OPTIMIZERS if n != "sgd"])
def test_reset_clears_state(name):
    gs = _gradients(8, 3)
    w_fresh = np.ones(8)
    fresh = create_optimizer(name)
    fresh.step(w_fresh, gs[2].copy())
    opt = create_optimizer(name)
    w = np.ones(8)
    opt.step(w, gs[0].copy())
    opt.step(w, gs[1].copy())
    opt.reset()
    w[...] = 1
    opt.step(w, gs[2].copy())
    np.testing.assert_array_equal(w, w_fresh)


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_state_dict_round_trip(name):
    gs = _gradients(12, 6, seed=3)
    w_a = np.linspace(-1, 1, 12)
    a = create_optimizer(name, weight_decay=0.01)
    for g in gs[:3]:
        a.step(w_a, g.copy())
    a.lr = a.lr * 0.5                           # a schedule step is part of the state
    state = a.state_dict()
    assert all(isinstance(v, (str, int, float, np.ndarray)) for v in state.values())
    w_b = w_a.copy()
    b = create_optimizer(name, lr=0.9)          # options come from the state
    b.load_state_dict(state)
    for g in gs[3:]:
        a.step(w_a, g.copy())
        b.step(w_b, g.copy())
    np.testing.assert_array_equal(w_a, w_b)


def test_state_dict_checks():
    adam = create_optimizer("adam")
    adam.step(np.zeros(4), np.ones(4))
    with pytest.raises(UsageError, match="adam"):
        create_optimizer("sgd").load_state_dict(adam.state_dict())
    other = create_optimizer("adam")
    other.load_state_dict(adam.state_dict())
    with pytest.raises(UsageError, match="shape"):
        other.step(np.zeros(5), np.ones(5))


def test_factory_errors():
    with pytest.raises(UsageError, match="valid: sgd, momentum, nesterov"):
        create_optimizer("lbfgs")
    for bad in ({"lr": 0}, {"lr": -1}, {"momentum": 1.0}, {"weight_decay": -0.1},
                {"clip": -1}, {"lr": "fast"}):
        with pytest.raises(UsageError):
            create_optimizer("momentum", **bad)
    with pytest.raises(UsageError, match="beta1"):
        create_optimizer("adam", beta1=1.5)
    with pytest.raises(UsageError, match="does not take momentum"):
        create_optimizer("adam", momentum=0.9)
    # None means "default" so a CLI can pass every flag through
    assert create_optimizer("adam", lr=None, weight_decay=None).lr == 0.001
