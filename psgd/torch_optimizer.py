"""psgd.torch.DistributedOptimizer: psgd in one line, for code written for
Horovod or DDP (no torch import here: the optimizer is used through its
methods).

    sync = psgd.torch.create("syncgrad", model)
    opt = psgd.torch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), sync)
    for x, y in batches:
        opt.zero_grad()
        loss_fn(model(x), y).backward()     # the gradients leave in buckets meanwhile
        opt.step()                          # waits for their mean, then steps
    opt.stop()                              # out of data: step with the others until all are

To clip the mean gradients (not each rank's own), sum them first, as with
Horovod: `loss.backward(); opt.synchronize(); clip_grad_norm_(...); opt.step()`.

The optimizer object stays the user's: its class becomes a subclass of its
own class (as Horovod does), so isinstance, state_dict, param_groups and LR
schedulers made afterwards keep working. syncgrad averages every step;
the model-averaging algorithms synchronize every `every` steps.
"""
import numbers
from contextlib import contextmanager

from .algorithms import by_n
from .errors import UsageError


class _Distributed:
    """The methods DistributedOptimizer puts in front of the optimizer's."""

    def step(self, closure=None):
        loss = closure() if closure is not None else None
        if self.sync.buckets is not None:
            if self.sync.sums_steps:        # the optimizer steps before the sum
                self.sync.synchronize(self.samples, optimizer=self)
                return loss
            if not (self._psgd_summed or self._psgd_skip):
                self.sync.synchronize(self.samples)
            self._psgd_summed = False
            super().step()
            return loss
        super().step()
        self._psgd_since += self.samples
        self._psgd_steps += 1
        if self._psgd_steps % self.every == 0:
            self.sync.synchronize(self._psgd_since, optimizer=self)
            self._psgd_since = 0
        return loss

    def synchronize(self):
        """syncgrad: the mean gradients into .grad now, before step() (which
        then steps without summing again): to clip or read them between
        backward and the step, as with Horovod's synchronize(). Clipping
        before it would clip each rank's own gradients while some buckets
        are already summing, and not those of a layer summed through its rows."""
        if self.sync.buckets is None:
            raise UsageError("synchronize(): only syncgrad sums gradients before the step "
                             "(this is %s, which syncs every %d steps)" % (self.sync.name, self.every))
        if self.sync.sums_steps:
            raise UsageError("synchronize(): under compression_momentum=local the ranks sum "
                             "their optimizer steps, taken in step(): there is no mean "
                             "gradient before it")
        if self._psgd_summed:
            raise UsageError("synchronize() twice before one step(): the second would sum the "
                             "mean again")
        self.sync.synchronize(self.samples)
        self._psgd_summed = True

    @contextmanager
    def skip_synchronize(self):
        """Horovod's: step() inside does not sum (after synchronize(), it
        would not anyway)."""
        self._psgd_skip, before = True, self._psgd_skip
        try:
            yield
        finally:
            self._psgd_skip = before

    def local_step(self, closure=None):
        """The wrapped optimizer's own step (what stop() repeats)."""
        return super().step(closure)

    def zero_grad(self, set_to_none=True):
        """syncgrad: zero in psgd's flat buffer, so backward writes there
        (set_to_none would make torch allocate, and psgd copy, every step)."""
        self._psgd_summed = False       # new gradients: summed by the next step
        if self.sync.buckets is not None:
            self.sync.zero_grad()
        else:
            super().zero_grad(set_to_none=set_to_none)

    def no_sync(self):
        """syncgrad: `with opt.no_sync(): loss.backward()` accumulates
        without sending; the next backward outside sends the sum."""
        return self.sync.no_sync()

    def stop(self):
        """Out of data: fold in what was not synchronized yet and take part
        (stepping with the others, syncgrad) until every rank is done."""
        since, self._psgd_since = self._psgd_since, 0
        return self.sync.stop(since, optimizer=self)


def DistributedOptimizer(optimizer, sync, samples=1, every=None):
    """`optimizer` (a torch optimizer over the model `sync` binds) made to
    synchronize through `sync` (psgd.torch.create): step() averages the
    gradients first (syncgrad; under compression_momentum=local it steps
    first and averages the steps) or synchronizes every `every` steps (the
    other algorithms; default: the trainer's block, algorithms/by_n.py).
    `samples`: what one step weighs in the averages (default 1: every rank
    alike, as DDP); with uneven batches set `opt.samples = len(batch)` before
    each backward. Returns the same object."""
    if sync.role == "server":
        raise UsageError("%s rank %d serves: call sync.run() there, not an optimizer"
                         % (sync.name, sync.node.rank))
    if isinstance(optimizer, _Distributed):
        raise UsageError("the optimizer is already a psgd DistributedOptimizer")
    for name, value in (("samples", samples), ("every", every)):
        if value is not None and (isinstance(value, bool) or
                                  not isinstance(value, numbers.Integral) or value < 1):
            raise UsageError("DistributedOptimizer: %s must be a whole number >= 1, got %r"
                             % (name, value))
    if sync.buckets is not None and every not in (None, 1):
        raise UsageError("DistributedOptimizer: syncgrad averages every step (every=%r); "
                         "to accumulate, run backward under opt.no_sync()" % (every,))
    mine = {id(p) for p in sync.model.parameters()}
    if not all(id(p) in mine for group in optimizer.param_groups for p in group["params"]):
        raise UsageError("DistributedOptimizer: the optimizer updates tensors that are not "
                         "parameters of the model psgd.torch.create bound")
    cls = type(optimizer)
    optimizer.__class__ = type("Distributed" + cls.__name__, (_Distributed, cls), {})
    optimizer.sync, optimizer.samples = sync, samples
    optimizer.every = every or (1 if sync.buckets is not None else by_n.block_steps(
        sync.name, sync.N, sync.options.get("delayed")))
    optimizer._psgd_since = optimizer._psgd_steps = 0
    optimizer._psgd_summed = optimizer._psgd_skip = False
    if sync.buckets is not None and not sync.sums_steps:   # steps: summed after backward
        sync.buckets.expect = lambda: optimizer.samples
    return optimizer
