"""`python -m psgd.worker` whose workers compute as if on a device of their
own: each minibatch takes at least STEP seconds (a sleep after the
computation), and rank SLOW's FACTOR times that. On this 2-core machine a
rank's real compute shares the cores with every other rank, so a fifth
worker adds no compute; sleeping ranks leave the cores free, so each
worker's speed is its STEP, as on hosts of their own. Used by
uneven_workers.py; psgd itself knows nothing of it.

    mpirun -np 5 python benchmarks/paced_worker.py '{"step": 0.02, "slow": 4,
        "factor": 2}' --algo easgd [psgd-train flags...]
"""
import json
import sys
import time

from mpi4py import MPI

import psgd.worker
from psgd.nnet import Network

SPEC = json.loads(sys.argv[1])
RANK = MPI.COMM_WORLD.Get_rank()
STEP = SPEC["step"] * (SPEC.get("factor", 1) if RANK == SPEC.get("slow") else 1)
computed = Network.loss_and_grad


def paced(self, *args, **kwargs):
    started = time.perf_counter()
    loss = computed(self, *args, **kwargs)
    time.sleep(max(0.0, STEP - (time.perf_counter() - started)))
    return loss


Network.loss_and_grad = paced
sys.exit(psgd.worker.main(sys.argv[2:]))
