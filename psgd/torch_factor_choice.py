"""Which Linear layers psgd.torch syncgrad sums through their rows
(torch_factors.py), decided once in create(), alike on every rank: the
option factors (None: where the ranks span hosts and a layer spares each
host's link PSGD_TORCH_FACTORS_SAVING bytes a step; True: wherever it saves
bytes; False: never), the layers that can (a Linear's weight of its own,
trained; its bias with it where it lies right behind), and the ranks' BLAS
and CPU, which decide the bits of every rank's own product (no torch import
here: the module is used through its methods)."""
import os
import platform

import numpy as np

from . import agreement, mpi, settings
from .errors import UsageError
from .torch_factors import saving

SAVING = "PSGD_TORCH_FACTORS_SAVING"


def fingerprint():
    """What decides the bits of G on this rank: NumPy's BLAS and the CPU."""
    blas = ""
    try:
        blas = str(np.__config__.CONFIG["Build Dependencies"]["blas"].get("version", ""))
    except (AttributeError, KeyError, TypeError):
        pass
    cpu = platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f
                        if line.startswith("model name")), cpu)
    except OSError:
        pass
    return "numpy %s, blas %s, %s, OPENBLAS_NUM_THREADS=%s" % (
        np.__version__, blas, cpu, os.environ.get("OPENBLAS_NUM_THREADS", ""))


def check_option(factors, sums_gradients):
    """create()'s factors, checked before anything is bound."""
    if factors not in (None, True, False):
        raise UsageError("factors must be True, False or None (default: where the ranks span "
                         "hosts), got %r" % (factors,))
    if factors is not None and not sums_gradients:
        raise UsageError("factors: only syncgrad sums gradients")


def choose(model, linear, params, algorithm, factors, device):
    """({weight's index in `params`: (module, [its index, its bias's])} of the
    Linear layers (`linear`: torch's class) that create() sums through their
    rows, the fewest bytes a step must save to go on) for syncgrad
    `algorithm`. factors: None (where the ranks span hosts), True (wherever
    it saves), False. Collective (every rank passes the same factors); a
    UsageError for factors=True where it cannot be is raised on every rank
    alike."""
    comm = algorithm.comm
    least = 1 if factors else settings.get(SAVING)
    if factors is False or comm.Get_size() == 1:    # (alike on every rank: create checked)
        return {}, least
    agreement.check_same(comm, {SAVING: least}, "psgd.torch's factors")
    error, chosen = None, {}
    try:
        chosen = _choose(model, linear, params, algorithm, factors, device, least)
    except UsageError as exc:
        error = exc
    agreement.agree(comm, error)
    return chosen, least


def _choose(model, linear, params, algorithm, factors, device, least):
    comm = algorithm.comm
    why = ("a CUDA model (its rows would have to cross to the host: not built)"
           if device.type == "cuda" else
           "compression_momentum=local (the buckets sum optimizer steps, not gradients)"
           if algorithm.shares_momentum else None)
    if why:
        if factors:
            raise UsageError("factors=True: not with %s; leave factors unset" % why)
        return {}
    if factors is None and not mpi.spans_hosts(comm):
        return {}
    prints = mpi.allgather_text(comm, fingerprint(), 512)
    if len(set(prints)) > 1:
        if factors:
            others = [r for r, p in enumerate(prints) if p != prints[0]]
            raise UsageError("factors=True: ranks %s compute with another BLAS or CPU than "
                             "rank 0 (%r against %r), so their sums would differ in the last "
                             "bits; leave factors unset" % (others, prints[others[0]], prints[0]))
        return {}
    users = {}
    for module in model.modules():
        for _, p in module.named_parameters(recurse=False):
            users[id(p)] = users.get(id(p), 0) + 1
    index = {id(p): i for i, p in enumerate(params)}
    chosen = {}
    for m in model.modules():
        if (isinstance(m, linear) and m.weight.requires_grad and id(m.weight) in index
                and users[id(m.weight)] == 1
                and saving(comm.Get_size(), 1, m.in_features, m.out_features,
                           m.weight.element_size()) >= least):
            i = index[id(m.weight)]
            bias = m.bias is not None and index.get(id(m.bias)) == i + 1 and \
                m.bias.requires_grad and users[id(m.bias)] == 1
            chosen[i] = (m, [i, i + 1] if bias else [i])
    return chosen
