"""psgd.train.run() many times in one process (what a hyper-parameter sweep
in a user's script does) leaks no communicator and no file handle: every
communicator psgd duplicates is freed when the run ends."""
import os

import pytest
from mpi4py import MPI

import psgd.train

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(300)]

RUNS = 20
CONFIGS = [dict(algo="bsp"), dict(algo="bmuf"), dict(algo="easgd"), dict(algo="asgd"),
           dict(algo="syncgrad"), dict(model_parallel=True)]
# hidden and minibatch: multiples of 2, 3 and 5 (model parallelism needs it)
SMALL = dict(model="mlp", hidden="60", minibatch_size=60, num_samples=200, epochs=1, quiet=True, progress="off",
             stall_timeout=30.0)


class CountingComm(MPI.Intracomm):
    """A communicator whose duplicates (and theirs) count their Dup and Free."""
    live = set()

    def Dup(self, *args):
        dup = CountingComm(super().Dup(*args))
        CountingComm.live.add(dup.py2f())
        return dup

    def Free(self):
        CountingComm.live.discard(self.py2f())
        super().Free()


def open_files():
    return sorted(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_twenty_runs_leak_no_communicator_and_no_file(comm, tmp_path):
    counting = CountingComm(comm)
    metrics = str(tmp_path / ("metrics-%d.jsonl" % comm.rank))
    psgd.train.run(psgd.train.make_config(metrics=metrics, **CONFIGS[0], **SMALL), counting)
    files = open_files()
    for i in range(RUNS):
        config = psgd.train.make_config(metrics=metrics, **CONFIGS[i % len(CONFIGS)], **SMALL)
        psgd.train.run(config, counting)
        assert CountingComm.live == set(), "run %d left %d communicator(s)" % (
            i, len(CountingComm.live))
    assert open_files() == files
