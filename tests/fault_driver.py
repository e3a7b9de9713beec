"""The fault driver of tests/launch/test_faults.py, copied into each test's
tmp_path and run under mpirun:

    python fault_driver.py FAULT_JSON [psgd-train flags...]

It monkeypatches the trainer so that one rank misbehaves (raises, sleeps,
writes NaN, dies while writing a checkpoint) at a given epoch and step,
then runs the real CLI, psgd.worker.main. psgd itself has no test hooks.
FAULT keys: what (raise | sleep | nan | kill-in-save | slow | die), rank, epoch,
step, every (nan from `step` on), seconds (sleep; slow: added to every step),
factor (slow: every step of the rank computes this much longer, from the start,
busy as a slower processor would be: a sleep would hand its core to the
others on an oversubscribed machine), sync (the easgd server fails
or sleeps at that sync instead), at_epoch_end (the fault strikes as the
rank begins the end of epoch `epoch`, its collectives, instead of at a
step), from (the server strikes at this rank's first sync in epoch
`epoch` instead), lagging and lag (that rank sleeps `lag` seconds as epoch
`epoch` starts), pace (seconds slept at every epoch start,
all ranks), dump (a folder: each rank writes digests of its parameters at
every step)."""
import hashlib
import json
import os
import signal
import sys
import time

import numpy as np
from mpi4py import MPI

import psgd.worker
from psgd.algorithms import easgd
from psgd.nnet import Network
from psgd.train.data_parallel import DataParallel
from psgd.train.hybrid import ModelParallel
from psgd.train.trainer import Trainer

FAULT = json.loads(sys.argv[1])
RANK = MPI.COMM_WORLD.Get_rank()
WHAT = FAULT.get("what")
MINE = RANK == FAULT.get("rank")
at = {"epoch": -1, "step": 0}


def strike(net=None):
    if WHAT == "raise":
        raise RuntimeError("injected fault")
    if WHAT == "sleep":
        time.sleep(FAULT.get("seconds", 3600))
    elif WHAT == "nan":
        net.grad_buffer.data[0] = np.nan
    elif WHAT == "die":             # the process, at once, as a lost host would
        os.kill(os.getpid(), signal.SIGKILL)


def paced(train_epoch):
    """A parallel strategy's train_epoch that marks the epoch and may be slower."""
    def paced_train_epoch(self, epoch, progress, watchdog):
        at["epoch"], at["step"] = epoch, 0
        time.sleep(FAULT.get("pace", 0))     # slower epochs, same numbers
        if RANK == FAULT.get("lagging") and epoch == FAULT.get("epoch", 0):
            time.sleep(FAULT["lag"])
        return train_epoch(self, epoch, progress, watchdog)
    return paced_train_epoch


loss_and_grad = Network.loss_and_grad


seen = []       # a digest of the parameters at every step


def faulty_loss_and_grad(self, *args, **kwargs):
    if FAULT.get("dump"):
        seen.append(hashlib.sha1(self.param_buffer.data.tobytes()).hexdigest())
    started = time.perf_counter()
    loss = loss_and_grad(self, *args, **kwargs)
    if MINE and WHAT == "slow":
        busy_until = time.perf_counter() + FAULT["factor"] * (time.perf_counter() - started)
        while time.perf_counter() < busy_until:
            pass
        time.sleep(FAULT.get("seconds", 0))
    at["step"] += 1
    if MINE and not FAULT.get("at_epoch_end") and at["epoch"] == FAULT.get("epoch", 0) and (
            at["step"] == FAULT.get("step", 1)
            or (FAULT.get("every") and at["step"] >= FAULT.get("step", 1))):
        strike(self)
    return loss


serve = easgd.EasgdServer.serve


def faulty_serve(self, rank):
    if MINE and ((rank == FAULT["from"] and at["epoch"] == FAULT.get("epoch", 0))
                 if "from" in FAULT else self.syncs == FAULT.get("sync", 1)):
        strike()
    return serve(self, rank)


replace = os.replace


def dying_replace(src, dst):
    """Half of this rank's checkpoint file is written, not yet renamed: die,
    once the other ranks' files of that epoch are in place (up to 20 s), so
    the epoch is torn by this rank alone whatever the timing (the job's
    teardown once caught rank 0 before its own rename)."""
    if "epoch-%04d" % FAULT["epoch"] in dst and os.path.basename(dst).startswith("rank-"):
        others = [os.path.join(os.path.dirname(dst), "rank-%05d.npz" % r)
                  for r in range(MPI.COMM_WORLD.Get_size()) if r != RANK]
        deadline = time.time() + 20
        while not all(map(os.path.exists, others)) and time.time() < deadline:
            time.sleep(0.01)
        with open(src, "r+b") as f:
            f.truncate(os.path.getsize(src) // 2)
        os.kill(os.getpid(), signal.SIGKILL)
    return replace(src, dst)


end_epoch = Trainer.end_epoch


def faulty_end_epoch(self, epoch, *args, **kwargs):
    if MINE and epoch == FAULT.get("epoch", 0):
        strike()
    return end_epoch(self, epoch, *args, **kwargs)


finish = Trainer.finish


def dumping_finish(self):
    with open(os.path.join(FAULT["dump"], "rank-%d.json" % RANK), "w") as f:
        json.dump(seen, f)
    return finish(self)


for strategy in (DataParallel, ModelParallel):
    strategy.train_epoch = paced(strategy.train_epoch)
Network.loss_and_grad = faulty_loss_and_grad
if FAULT.get("sync") or "from" in FAULT:
    easgd.EasgdServer.serve = faulty_serve
if FAULT.get("at_epoch_end"):
    Trainer.end_epoch = faulty_end_epoch
if WHAT == "kill-in-save" and MINE:
    os.replace = dying_replace
if FAULT.get("dump"):
    Trainer.finish = dumping_finish
sys.exit(psgd.worker.main(sys.argv[2:]))
