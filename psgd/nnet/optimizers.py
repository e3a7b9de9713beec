"""Local optimizers and their factory. Conventions are PyTorch's, state
starting at zero; each `_update` spells its formula in the docstring.

    opt = create_optimizer("adam", lr=1e-3, weight_decay=1e-4, clip=5.0)
    opt.step(net.param_buffer.data, net.grad_buffer.data)
    opt.reset()                                   # bmuf's reset_local_state
    state = opt.state_dict(); opt.load_state_dict(state)

Options every optimizer takes: lr, weight_decay (L2 added to the gradient),
clip (max global L2 norm of the gradient, 0 = off), clip_value (elementwise
bound, 0 = off). `None` values mean "the default", so a CLI can pass all of
its flags through.
"""
import math

from ..errors import UsageError
from . import fused
from .optimizer import Optimizer


class SGD(Optimizer):
    name = "sgd"
    defaults = {"lr": 0.1}

    def _update(self, xp, w, g):
        """w -= lr * g"""
        tmp = self._tmp[0]
        xp.multiply(g, self.lr, out=tmp)
        w -= tmp


class Momentum(Optimizer):
    name = "momentum"
    defaults = {"lr": 0.01, "momentum": 0.9}
    slots = ("v",)
    nesterov = False

    def _update(self, xp, w, g):
        """v = mu * v + g;  w -= lr * v          (momentum)
        v = mu * v + g;  w -= lr * (g + mu * v)   (nesterov)"""
        mu, v = self.momentum, self.v
        if fused.usable(xp):
            fused.momentum(g, mu, self.lr, self.nesterov, w, v)
            return
        tmp = self._tmp[0]
        v *= mu
        v += g
        if self.nesterov:
            xp.multiply(v, mu, out=tmp)
            tmp += g
            tmp *= self.lr
        else:
            xp.multiply(v, self.lr, out=tmp)
        w -= tmp


class Nesterov(Momentum):
    name = "nesterov"
    nesterov = True


class Adagrad(Optimizer):
    name = "adagrad"
    defaults = {"lr": 0.01, "eps": 1e-10}
    slots = ("s",)

    def _update(self, xp, w, g):
        """s += g^2;  w -= lr * g / (sqrt(s) + eps)"""
        tmp, s = self._tmp[0], self.s
        xp.multiply(g, g, out=tmp)
        s += tmp
        xp.sqrt(s, out=tmp)
        tmp += self.eps
        xp.divide(g, tmp, out=tmp)
        tmp *= self.lr
        w -= tmp


class Adadelta(Optimizer):
    name = "adadelta"
    defaults = {"lr": 1.0, "rho": 0.9, "eps": 1e-6}
    slots = ("s", "u")
    scratch = 2

    def _update(self, xp, w, g):
        """s = rho s + (1-rho) g^2;  d = sqrt(u + eps) / sqrt(s + eps) * g;
        u = rho u + (1-rho) d^2;  w -= lr * d"""
        (tmp, d), s, u, rho = self._tmp, self.s, self.u, self.rho
        xp.multiply(g, g, out=tmp)
        tmp *= 1 - rho
        s *= rho
        s += tmp
        xp.add(u, self.eps, out=d)
        xp.add(s, self.eps, out=tmp)
        xp.divide(d, tmp, out=d)
        xp.sqrt(d, out=d)
        d *= g
        xp.multiply(d, d, out=tmp)
        tmp *= 1 - rho
        u *= rho
        u += tmp
        d *= self.lr
        w -= d


class RMSprop(Optimizer):
    name = "rmsprop"
    defaults = {"lr": 0.001, "rho": 0.99, "eps": 1e-8, "momentum": 0.0}
    slots = ("s", "buf")

    def _update(self, xp, w, g):
        """s = rho s + (1-rho) g^2;  step = g / (sqrt(s) + eps);
        with momentum: buf = mu buf + step, w -= lr * buf; else w -= lr * step"""
        tmp, s = self._tmp[0], self.s
        xp.multiply(g, g, out=tmp)
        tmp *= 1 - self.rho
        s *= self.rho
        s += tmp
        xp.sqrt(s, out=tmp)
        tmp += self.eps
        xp.divide(g, tmp, out=tmp)
        if self.momentum:
            self.buf *= self.momentum
            self.buf += tmp
            xp.multiply(self.buf, self.lr, out=tmp)
        else:
            tmp *= self.lr
        w -= tmp


class Adam(Optimizer):
    name = "adam"
    defaults = {"lr": 0.001, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8}
    slots = ("m", "v")
    momentum_term = "beta1"

    def _update(self, xp, w, g):
        """m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
        w -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)"""
        b1, b2, m, v = self.beta1, self.beta2, self.m, self.v
        bc1, bc2 = 1 - b1 ** self.t, math.sqrt(1 - b2 ** self.t)
        # the same update with both corrections moved into two scalars:
        # lr*bc2/bc1 * m / (sqrt(v) + eps*bc2)
        step, eps_hat = self.lr * bc2 / bc1, self.eps * bc2
        if fused.usable(xp):
            fused.adam(g, b1, b2, step, eps_hat, w, m, v)
            return
        tmp = self._tmp[0]
        m *= b1
        xp.multiply(g, 1 - b1, out=tmp)
        m += tmp
        xp.multiply(g, g, out=tmp)
        tmp *= 1 - b2
        v *= b2
        v += tmp
        xp.sqrt(v, out=tmp)
        tmp += eps_hat
        xp.divide(m, tmp, out=tmp)
        tmp *= step
        w -= tmp


OPTIMIZERS = {cls.name: cls for cls in (SGD, Momentum, Nesterov, Adagrad, Adadelta, RMSprop, Adam)}


def create_optimizer(name, **options):
    """A local optimizer by name; bad names or options raise UsageError."""
    try:
        cls = OPTIMIZERS[name]
    except KeyError:
        raise UsageError("unknown optimizer %r; valid: %s" % (name, ", ".join(OPTIMIZERS)))
    return cls(**options)


def momentum_option(name):
    """The option that is optimizer `name`'s momentum term (the trainer's
    --momentum): Adam's beta1, else momentum (which SGD, AdaGrad and
    AdaDelta refuse)."""
    cls = OPTIMIZERS.get(name)
    return cls.momentum_term if cls else "momentum"
