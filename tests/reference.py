"""Serial NumPy evaluations of the equations of docs/algorithms.md, written
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
    """docs/algorithms.md's bmuf, line by line, with its state w_g, D and s
    (where the block started: w_g at first):
        G  = sum_k (n_k / n) * (w_k - s)
        D <- eta * D + zeta * G
        w_g <- w_g + D
        s  <- w_g + eta * D   if nesterov else   w_g
        w_k <- s"""
    w_g, D = state["w_g"], state["D"]
    s = state.setdefault("s", w_g.copy())
    n = sum(ns)
    G = sum((n_k / n) * (w_k - s) for w_k, n_k in zip(ws, ns))
    D = eta * D + zeta * G
    w_g = w_g + D
    s = w_g + eta * D if nesterov else w_g
    state["w_g"], state["D"], state["s"] = w_g, D, s
    return [s.copy() for _ in ws]


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


# Server algorithms: replays in the order the server logged its services. ------
# `log` rows are (rank, n_k, order, reply, ...) as psgd's server records them;
# `local(k, t)` is the change worker k makes to its model before its t-th sync.
def easgd(x0, log, local, alpha, late=False, owed=None, workers=None):
    """Returns the center and, per worker, its model after each of its syncs.
    The worker gets the center as it was after `reply` updates (`order` when
    served in line, earlier when served in the background); the server's
    update reads the center as it is when it is applied. `late`: every
    worker leaves its exchanges in flight (overlap.py): the pull of sync t,
    alpha (s - x_reply) with s the model it sent, lands as sync t + 1
    begins; `owed[k]` gets the pull its stop() still lands. `workers`: N,
    under staleness_compensation=scale: the server's rate on a sync of
    staleness tau (the log's) is alpha * min(1, N / tau)."""
    versions, w, after, pulls = [x0.copy()], {}, {}, {}
    for row in log:
        k, order, reply = int(row[0]), int(row[2]), int(row[3])
        assert order == len(versions) - 1 and reply <= order, "log is not in update order"
        w_k = w.get(k, x0) + local(k, len(after.get(k, ()))) - pulls.pop(k, 0)
        x = versions[-1]
        rate = alpha * min(1.0, workers / max(1, int(row[5]))) if workers else alpha
        versions.append(x + rate * (w_k - x))               # the server, with the old w_k
        if late:
            pulls[k] = alpha * (w_k - versions[reply])
            w[k] = w_k
        else:
            w[k] = w_k - alpha * (w_k - versions[reply])    # the worker, with the x it got
        after.setdefault(k, []).append(w[k].copy())
    if owed is not None:
        owed.update(pulls)
    return versions[-1], after


def compensate(delta, x, x_start, staleness, compensation, lam=1.0):
    """A stale delta as the server corrects it (staleness_compensation)."""
    if compensation == "scale":
        return delta / max(1, staleness)
    if compensation == "dc":
        mean_square = np.mean(delta * delta)
        if lam == 0 or mean_square == 0:
            return delta
        return delta - np.minimum(lam / mean_square * delta * delta, 1.0) * (x - x_start)
    return delta


def asgd(x0, log, local, alpha, momentum=None, scope="worker", compensation="none", lam=1.0,
         delay=None):
    """asgd (momentum None) or masgd; with `delay` = D, masgd's delayed
    Nesterov update. A worker's reply is the center as it was after `reply`
    updates, so held (barrier) replies replay exactly. The staleness of a
    delta is `order` minus the worker's previous reply."""
    versions, base, v, after = [x0.copy()], {}, {}, {}
    period = []                                 # the deltas since the last Nesterov step
    for row in log:
        k, order, reply = int(row[0]), int(row[2]), int(row[3])
        assert order == len(versions) - 1, "log is not in service order"
        w_prev = versions[base.get(k, 0)]
        w_k = w_prev + local(k, len(after.get(k, ())))
        delta = compensate(w_k - w_prev, versions[-1], w_prev, order - base.get(k, 0),
                           compensation, lam)
        if delay:                               # each delta at once, the momentum every D-th
            period.append(delta)
            move = delta
            if len(period) == delay:
                mean = sum(period) / delay
                v[0] = momentum * v.get(0, np.zeros_like(delta)) + mean
                move = move + alpha * (momentum * v[0] + mean) - sum(period)
                period = []
        elif momentum is None:
            move = alpha * delta
        else:
            key = k if scope == "worker" else 0
            v[key] = momentum * v.get(key, np.zeros_like(delta)) + delta
            move = alpha * v[key]
        versions.append(versions[-1] + move)
        base[k] = reply
        after.setdefault(k, []).append(reply)
    models = {k: [versions[r].copy() for r in replies] for k, replies in after.items()}
    return versions[-1], models


def barrier_replies(log, finished, period, workers):
    """The reply counts docs/algorithms.md's barrier rule gives (asgd's
    barrier_period = K), from the service order alone: "the reply to every
    K-th sync the server serves, and every reply after it, is held until
    every still-running worker is waiting; then all are answered with the
    same x. K = 1 is lockstep; K <= 0 disables it." The count of syncs starts
    again at each release. `finished` rows are (rank, syncs served when it
    finished). A reply's count is the number of updates in the x it carries."""
    # a finish with count c came after sync c - 1 and before sync c; finishes
    # with the same count keep the server's order
    events = sorted([(int(o), 1, i) for i, (_, _, o, *rest) in enumerate(log)] +
                    [(int(c), 0, j) for j, (_, c) in enumerate(finished)])
    K = period
    running, held, since, replies, syncs = set(workers), [], 0, [None] * len(log), 0
    for _, is_sync, what in events:
        if is_sync:
            syncs += 1
            since += 1                         # syncs served since the last release
            if K > 0 and (since == K or held):  # the K-th, and every reply after it
                held.append(what)
            else:
                replies[what] = syncs
        else:
            running.discard(int(finished[what][0]))
        if held and {int(log[i][0]) for i in held} == running:
            for i in held:
                replies[i] = syncs
            held, since = [], 0
    return replies
