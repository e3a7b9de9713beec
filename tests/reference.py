"""Serial NumPy evaluations of the equations of ALGORITHMS.md, written
independently of psgd so the MPI tests can check the code against the math."""
import numpy as np


def weighted_mean(ws, ns, uniform=False):
    n = sum(ns)
    if uniform:
        active = [k for k, n_k in enumerate(ns) if n_k > 0]
        return sum(ws[k] for k in active) / len(active)
    return sum((n_k / n) * w for w, n_k in zip(ws, ns))


def bsp(ws, ns, state, uniform=False):
    mean = weighted_mean(ws, ns, uniform)
    return [mean.copy() for _ in ws]


def bmuf(ws, ns, state, eta, zeta, nesterov):
    """The block delta is measured from where the workers started the block
    (w_g + eta * D under Nesterov), as in Chen & Huo's NBM."""
    w_g, D = state["w_g"], state["D"]
    start = w_g + eta * D if nesterov else w_g
    G = sum((n_k / sum(ns)) * (w - start) for w, n_k in zip(ws, ns))
    D = eta * D + zeta * G
    w_g = w_g + D
    state["w_g"], state["D"] = w_g, D
    w = w_g + eta * D if nesterov else w_g
    return [w.copy() for _ in ws]


def sod(ws, ns, state, outer, lr, mu=0.9, beta1=0.9, beta2=0.999, eps=1e-8):
    w_g = state["w_g"]
    g = sum((n_k / sum(ns)) * (w_g - w) for w, n_k in zip(ws, ns))
    state["t"] = state.get("t", 0) + 1
    if outer == "sgd":
        w_g = w_g - lr * g
    elif outer in ("momentum", "nesterov"):
        v = mu * state.get("v", 0.0) + g
        state["v"] = v
        w_g = w_g - lr * (g + mu * v if outer == "nesterov" else v)
    elif outer == "adam":
        t = state["t"]
        m = beta1 * state.get("m", 0.0) + (1 - beta1) * g
        s = beta2 * state.get("s", 0.0) + (1 - beta2) * g * g
        state["m"], state["s"] = m, s
        m_hat, s_hat = m / (1 - beta1 ** t), s / (1 - beta2 ** t)
        w_g = w_g - lr * m_hat / (np.sqrt(s_hat) + eps)
    state["w_g"] = w_g
    return [w_g.copy() for _ in ws]
