"""Bring your own PyTorch model (optional: `pip install psgd[torch]`).

    import psgd.torch
    sync = psgd.torch.create("bmuf", model)     # collective over MPI.COMM_WORLD
    for block in blocks:                        # your loop, your optimizer
        n_k = train_on(block, model, opt)       # samples since the last sync
        sync.synchronize(n_k, optimizer=opt)
    sync.stop(n_k_left, optimizer=opt)

create() moves the module's parameters (with buffers=True also its
floating-point buffers, e.g. BatchNorm running statistics) into one flat
array and points every tensor at a view of it (`p.data = view`). The
Parameter objects stay the same, so an optimizer built before or after,
autograd and state_dict()/load_state_dict() all work on the memory the
algorithm exchanges: no copy per step. On the CPU the flat array is NumPy
(torch.from_numpy shares it); on a GPU it is CuPy, shared with torch through
DLPack on the same device.

Rank 0's model reaches every rank inside create(). syncgrad averages the
`.grad` tensors (a second flat array) in buckets that leave while backward
runs (torch_buckets.py), a Linear layer's through its rows across hosts
(torch_factors.py). Server algorithms: rank 0 serves (`sync.run()`).
"""
import contextlib

import numpy as np
import torch

from . import agreement, algorithms, mpi, torch_factor_choice
from .algorithms import by_n
from .algorithms.base import CollectiveWorker
from .buffers import FlatBuffer
from .errors import UsageError
from .torch_buckets import Buckets, bucket_bytes
from .torch_optimizer import DistributedOptimizer

__all__ = ["create", "DistributedOptimizer", "TorchSync"]

_DTYPES = {torch.float32: np.float32, torch.float64: np.float64}


def create(name, model, comm=None, buffers=False, bucket_mb=None, factors=None, **options):
    """psgd algorithm `name` over `model`'s parameters, which from now on live in
    psgd's flat buffer. Collective over `comm` (default MPI.COMM_WORLD): a bad
    model on any rank raises the same UsageError on every rank, before any rank
    changes its model. `options` are the algorithm's (docs/algorithms.md);
    those not given, the trainer's for N workers (algorithms/by_n.py).
    `bucket_mb` (syncgrad): megabytes of gradients per sum (default 25, as
    DDP; 0: one bucket per tensor), summed through MPI (no other `exchange`).
    `compression` (fp16 | bf16 | 1bit): each bucket a compressed sum with its
    own residuals (a CUDA model's on its GPU: psgd/compression/device.py).
    `factors` (syncgrad, torch_factors.py): Linear layers summed through their
    rows where the ranks span hosts (None), anywhere (True) or never (False)."""
    comm = mpi.communicator(comm)
    error = plan = None
    try:
        plan = _Plan(name, model, buffers, bucket_mb, factors)
        if not plan.needs_grads:    # not syncgrad's by_n: with 1bit its ranks' steps (README)
            options = by_n.given_over(name, comm.size, options)
        else:                       # the buckets start MPI's non-blocking sums
            if options.get("exchange") not in (None, "mpi"):
                raise UsageError("psgd.torch syncgrad sums its buckets through MPI; "
                                 "exchange=%r is not supported with it" % options["exchange"])
            options["exchange"] = "mpi"
    except UsageError as exc:
        error = exc
    agreement.agree(comm, error)
    # tensors pair by position: the same shapes in another order would cross-wire
    agreement.check_same(comm, {"parameters": [n for n, _ in plan.params],
                                "buffers": [n for n, _ in plan.buffers]},
                         "the model (its tensor names, in order)")
    if plan.needs_grads:    # other buckets: sums that do not match
        agreement.check_same(comm, {"bucket_mb": plan.bucket_bytes / 2 ** 20,
                                    "factors": factors}, "bucket_mb and factors")
    params = plan.bind(plan.params)
    grads = plan.bind_grads() if plan.needs_grads else None
    stats = plan.bind(plan.buffers) if plan.buffers else None
    with _current(plan.device):
        algorithm = algorithms.create(
            name, params.numpy_views, comm=comm,
            grads=None if grads is None else grads.numpy_views,
            stats=None if stats is None else stats.numpy_views, **options)
    for bound, flat in ((params, algorithm.buffer), (grads, algorithm.grad_buffer),
                        (stats, algorithm.stat_buffer)):
        if bound is not None and flat is not None and not any(
                a is bound.flat for a in (flat.data, flat.data.base)):  # syncgrad: + tail
            raise RuntimeError("psgd copied the torch tensors instead of adopting them")
    buckets = grads and Buckets(
        algorithm, params.names, params.tensors, grads.views, plan.bucket_bytes,
        _recorded_event if plan.device.type == "cuda" else None, torch_factor_choice.choose(
            model, torch.nn.Linear, params.tensors, algorithm, factors, plan.device))
    return TorchSync(algorithm, model, plan, params, grads, stats, buckets)


class _Plan:
    """What create() will bind, checked before anything is changed."""

    def __init__(self, name, model, buffers, bucket_mb, factors):
        if not isinstance(model, torch.nn.Module):
            raise UsageError("psgd.torch.create needs a torch.nn.Module, got %s"
                             % type(model).__name__)
        cls = algorithms.REGISTRY.get(name, algorithms.Algorithm)   # unknown: create() says so
        self.needs_grads = cls.needs_grads
        self.grad_tail = cls.grad_tail
        self.bucket_bytes = bucket_bytes(bucket_mb, self.needs_grads)
        torch_factor_choice.check_option(factors, self.needs_grads)
        self.params = _unique(model.named_parameters())
        if not self.params:
            raise UsageError("the model has no parameters to synchronize")
        if buffers and not issubclass(cls, CollectiveWorker):
            raise UsageError("buffers=True: %s does not average buffers; the collective "
                             "algorithms (bsp, bmuf, sod, syncgrad) do" % name)
        self.buffers = [(n, b) for n, b in _unique(model.named_buffers())
                        if buffers and b.is_floating_point()]
        self.device = _one_device(self.params + self.buffers)
        for what, tensors in (("parameter", self.params), ("buffer", self.buffers)):
            _one_dtype(what, tensors)

    def bind(self, named):
        return _Bound(named, self.device)

    def bind_grads(self):
        grads = _Bound([(n, torch.zeros_like(p)) for n, p in self.params], self.device,
                       self.grad_tail)
        for (_, p), view in zip(self.params, grads.views):
            p.grad = view
        return grads


class _Bound:
    """One flat array (NumPy or CuPy) that `named` tensors now view."""

    def __init__(self, named, device, tail=0):
        self.names = [n for n, _ in named]
        self.tensors = [t for _, t in named]
        total = sum(t.numel() for t in self.tensors) + tail
        dtype = _DTYPES[self.tensors[0].dtype]
        if device.type == "cuda":
            import cupy
            with cupy.cuda.Device(device.index):
                self.flat = cupy.zeros(total, dtype=dtype)
            flat_t = torch.from_dlpack(self.flat)
        else:
            self.flat = np.zeros(total, dtype=dtype)
            flat_t = torch.from_numpy(self.flat)
        self.numpy_views = FlatBuffer(self.flat, [tuple(t.shape) for t in self.tensors],
                                      tail).views
        self.views, offset = [], 0
        with torch.no_grad():
            for t in self.tensors:
                view = flat_t[offset:offset + t.numel()].view(t.shape)
                view.copy_(t)
                t.data = view
                self.views.append(view)
                offset += t.numel()
        _torch_done(device)
        self.pointers = [v.data_ptr() for v in self.views]

    def replaced(self):
        """Name of the first tensor no longer viewing the flat array, or None."""
        for name, t, ptr, view in zip(self.names, self.tensors, self.pointers, self.views):
            if t.numel() and (t.data_ptr() != ptr or t.shape != view.shape):
                return name
        return None


def _local_step(optimizer, device):
    """The optimizer's own step (DistributedOptimizer's would synchronize),
    on a GPU between psgd's kernels before it and after it (other streams)."""
    step = getattr(optimizer, "local_step", optimizer.step)
    if device.type != "cuda":
        return step

    def ordered_step():
        _psgd_done(device)
        step()
        _torch_done(device)
    return ordered_step


class TorchSync(mpi.Closeable):
    """The algorithm object of this rank, for a torch model. Everything the
    NumPy API offers (role, run, begin_round, params, state_dict, close, ...)
    is here too; synchronize and stop also check the binding and take the
    user's optimizer; load_state_dict replaces the model through the
    algorithm; `with sync:` closes it."""

    def __init__(self, algorithm, model, plan, params, grads, stats, buckets):
        self.algorithm = algorithm
        self.model = model
        self.buckets = buckets      # syncgrad's reducer, else None
        self._params, self._grads, self._stats = params, grads, stats
        self._members = [id(t) for t in params.tensors]
        self._device = plan.device

    def __getattr__(self, name):
        return getattr(self.algorithm, name)

    @property
    def sums_steps(self):
        """syncgrad under compression_momentum=local: the buckets sum each
        rank's optimizer step, taken after backward, not its gradients."""
        return self.buckets is not None and self.algorithm.shares_momentum

    def __repr__(self):
        return "<psgd.torch %s %s on %s>" % (self.algorithm.name, self.algorithm.role,
                                             self._device)

    def synchronize(self, n_k, optimizer=None):
        """One sync of algorithm `name` (n_k: samples since the last one).
        `optimizer`: a torch optimizer whose state bmuf resets after each sync
        (reset_local_state, on by default), as Kaldi's trainers do. syncgrad
        under compression_momentum=local sums the ranks' optimizer steps:
        `optimizer` steps here, on this rank's own gradient, before the sum,
        and no optimizer.step() follows."""
        steps = self.sums_steps
        if steps and optimizer is None:
            raise UsageError("syncgrad with compression_momentum=local sums the ranks' optimizer "
                             "steps: call synchronize(n_k, optimizer=opt), which steps it")
        with _current(self._device):
            self._before()
            if steps:
                more = self.algorithm.synchronize_step(n_k, _local_step(optimizer, self._device))
            else:
                more = self.algorithm.synchronize(n_k)
            self._after(optimizer)
        return more

    def stop(self, n_k=0, optimizer=None):
        """Fold in the last partial block and wait until every worker is done.
        syncgrad: `optimizer.step()` follows every averaged gradient while
        others still train, so this replica stays identical to theirs."""
        with _current(self._device):
            self._before()
            if self._grads is not None:
                step = None if optimizer is None else _local_step(optimizer, self._device)
                result = self.algorithm.stop(n_k, step=step)
            else:
                result = self.algorithm.stop(n_k)
            self._after(optimizer)
        return result

    def load_state_dict(self, state_dict, strict=True):
        """Collective: rank 0's `state_dict` (a torch state_dict of this
        model; other ranks may pass None) becomes the model on every rank,
        and the algorithm restarts from it (reset_to: its reference points,
        momentum and center). A plain model.load_state_dict() would write the
        parameters behind the algorithm's back. Server algorithms call it
        between rounds, as reset_to."""
        self.algorithm.check_reset()    # rank-local: reset_to's own check, before agree()
        self._check_binding()
        error = None
        if self.algorithm.node.is_main:
            try:
                if state_dict is None:
                    raise UsageError("load_state_dict: rank 0 must pass the state_dict")
                self._load_or_keep(state_dict, strict)
            except (RuntimeError, KeyError, TypeError, ValueError) as exc:
                # torch's first line names no key: keep them all, on one line
                error = exc if isinstance(exc, UsageError) else UsageError(
                    "load_state_dict: %s" % " ".join(str(exc).split()))
        agreement.agree(self.algorithm.comm, error)
        self._check_binding()
        with _current(self._device):
            _torch_done(self._device)
            self.algorithm.reset_to(self.algorithm.buffer.data if self.algorithm.node.is_main
                                    else None)
            if self.algorithm.stat_exchange is not None:    # BatchNorm statistics: rank 0's
                self.algorithm.stat_exchange.bcast(mpi.MAIN_RANK)
            self._after(None)

    def _load_or_keep(self, state_dict, strict):
        """model.load_state_dict (it copies into the views), or the model
        as it was: torch copies every key that fits before it raises for
        an unexpected one, which would leave rank 0 alone with half a model."""
        kept = {k: v.clone() for k, v in self.model.state_dict().items()}
        try:
            self.model.load_state_dict(state_dict, strict=strict)
        except BaseException:
            self.model.load_state_dict(kept)
            raise

    def close(self):
        if self.buckets is not None:    # the hooks off the model
            self.buckets.close()
        self.algorithm.close()

    def run(self):
        """Server algorithms, rank 0: serve until every worker has finished."""
        with _current(self._device):
            self._before()
            stats = self.algorithm.run()
            self._after(None)
        return stats

    # ------------------------------------------------------------------------
    def zero_grad(self):
        """syncgrad: zero every .grad in place, in psgd's flat buffer (so the
        next backward writes there: no copy), whatever set_to_none says."""
        self._syncgrad("zero_grad").zero_grad()

    def no_sync(self):
        """syncgrad: `with sync.no_sync():` backward passes inside accumulate
        their gradients and send nothing; the next one outside sends the
        sum (DDP's no_sync)."""
        return self._syncgrad("no_sync").no_sync()

    def _syncgrad(self, call):
        if self.buckets is None:
            raise UsageError("%s: only syncgrad sums gradients (this is %s)"
                             % (call, self.algorithm.name))
        return self.buckets

    # ------------------------------------------------------------------------
    def _before(self):
        self._check_binding()
        _torch_done(self._device)

    def _after(self, optimizer):
        _psgd_done(self._device)
        if optimizer is not None and self.algorithm.clears_local_state:
            optimizer.state.clear()

    def _check_binding(self):
        members = [id(p) for p in self.model.parameters()]
        replaced = None
        if members != self._members:
            replaced = "the model's parameter list"
        else:
            replaced = self._params.replaced() or (self._stats and self._stats.replaced())
        if replaced:
            raise UsageError(
                "%s no longer lives in psgd's flat buffer: it was replaced after "
                "psgd.torch.create (by .to(), .double(), assigning .data or a new "
                "module); finish changing the model, then create the sync" % replaced)


def _current(device):
    """The model's GPU made CuPy's current device (psgd's kernels, copies and
    stream synchronizations run on the current device; a model on cuda:1
    without torch.cuda.set_device(1) would otherwise meet "peer access is
    unavailable"); nothing on the CPU."""
    if device.type != "cuda":
        return contextlib.nullcontext()
    import cupy
    return cupy.cuda.Device(device.index)


def _psgd_done(device):
    """psgd's work on the model's GPU is done (queued on CuPy's current stream)."""
    if device.type == "cuda":
        import cupy
        cupy.cuda.get_current_stream().synchronize()


def _torch_done(device):
    """The user's torch work on the model's GPU is done, on whichever of its
    streams it was queued (not only the current one)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _unique(named):
    """(name, tensor) pairs, each tensor once (tied weights are shared)."""
    seen, out = set(), []
    for name, t in named:
        if id(t) not in seen:
            seen.add(id(t))
            out.append((name, t))
    return out


def _one_device(named):
    devices = sorted({str(t.device) for _, t in named})
    if len(devices) > 1:
        raise UsageError("the model's tensors are on several devices (%s); psgd keeps one "
                         "flat buffer per rank: move the model to one device first"
                         % ", ".join(devices))
    device = named[0][1].device
    if device.type not in ("cpu", "cuda"):
        raise UsageError("the model is on %s; psgd.torch supports cpu and cuda" % device)
    return device


def _one_dtype(what, named):
    for name, t in named:
        if t.dtype not in _DTYPES:
            raise UsageError("%s %r is %s; psgd synchronizes float32 or float64 tensors"
                             % (what, name, str(t.dtype).replace("torch.", "")))
    dtypes = sorted({str(t.dtype).replace("torch.", "") for _, t in named})
    if len(dtypes) > 1:
        raise UsageError("the model's %ss mix %s; use one dtype (model.float() or "
                         "model.double())" % (what, " and ".join(dtypes)))


def _recorded_event():
    """A CUDA event behind the work queued so far (the gradients' kernels)."""
    event = torch.cuda.Event()
    event.record()
    return event
