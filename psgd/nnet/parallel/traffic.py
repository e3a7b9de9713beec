"""Bytes moved per training step, and whether the hybrid pays.

Counting convention: the bytes ONE rank sends in a step when every
collective runs bandwidth-optimally (ring algorithms; a rank receives as
many as it sends). For N ranks and a result of S bytes:

    Allgather (each rank adds S/N)           (N-1)/N * S
    Reduce_scatter (each rank keeps S/N)     (N-1)/N * S
    Allreduce                               2(N-1)/N * S

Two kinds are kept apart:
- "activations": whatever scales with the minibatch -- the forward gathers,
  their adjoints (activation gradients, reduce-scattered), the labels and the
  per-sample loss statistics, synchronized BatchNorm statistics;
- "gradients": the Allreduce of the data-parallel parameter gradients,
  which scales with the parameters of the convolutional part.

Pure data-parallel training of the same network instead Allreduces every
parameter gradient each step: 2(N-1)/N * (all parameters) bytes. Fully
connected layers have many parameters and few activations per sample, which
is why slicing them (Krizhevsky's "one weird trick") moves fewer bytes.
"""
KINDS = ("activations", "gradients")


def allgather_bytes(piece_nbytes, size):
    return (size - 1) * piece_nbytes


def reduce_scatter_bytes(piece_nbytes, size):
    return (size - 1) * piece_nbytes


def allreduce_bytes(nbytes, size):
    return 2 * (size - 1) * nbytes / size if size > 1 else 0.0


def data_parallel_bytes(num_params, itemsize, size):
    """What averaging every gradient of a replicated model costs per step."""
    return allreduce_bytes(num_params * itemsize, size)


class Traffic:
    """Byte counter the communicating layers add to. Only training steps
    count (`active` is switched on by the network around a step)."""

    def __init__(self):
        self.active = False
        self.reset()

    def reset(self):
        self.bytes = dict.fromkeys(KINDS, 0.0)
        self.steps = 0

    def add(self, kind, nbytes):
        if self.active:
            self.bytes[kind] += nbytes

    def per_step(self):
        """{kind: mean bytes per counted step} (zeros before the first step)."""
        steps = max(self.steps, 1)
        return {k: v / steps for k, v in self.bytes.items()}


def report(traffic, num_params_full, itemsize, size):
    """A dict a test or a log line can use: bytes per step of the hybrid,
    split by kind, against pure data-parallel gradient averaging."""
    per = traffic.per_step()
    hybrid = sum(per.values())
    dp = data_parallel_bytes(num_params_full, itemsize, size)
    out = dict(per, hybrid=hybrid, data_parallel=dp, steps=traffic.steps, ranks=size)
    out["ratio"] = hybrid / dp if dp else float("inf") if hybrid else 1.0
    out["pays"] = hybrid < dp
    return out


def describe(rep):
    """One line: the numbers and the verdict."""
    verdict = ("the hybrid pays" if rep["pays"] else
               "pure data parallelism would move fewer bytes")
    return ("bytes moved per step per rank (%d ranks, mean of %d steps): hybrid %s "
            "(activations %s, gradients %s) vs %s for data-parallel gradient averaging "
            "of the same network (%.3gx): %s" % (
                rep["ranks"], rep["steps"], _size(rep["hybrid"]), _size(rep["activations"]),
                _size(rep["gradients"]), _size(rep["data_parallel"]), rep["ratio"], verdict))


def _size(nbytes):
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return "%.3g %s" % (nbytes / scale, unit)
    return "%d B" % round(nbytes)
