"""newbob's rejection goes through the algorithm (sync.reset_to): with the
second epoch forced to be rejected, every rank holds rank 0's best model
right after the rollback, for every algorithm, and the collective
algorithms end with identical replicas."""
import numpy as np
import pytest
from mpi4py import MPI

import psgd
from psgd.train import Trainer, make_config
from psgd.train.data_parallel import DataParallel
from psgd.train.schedule import Schedule

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(120)]

SMALL = dict(model="mlp", hidden="16", num_samples=300, epochs=3, quiet=True,
             lr_schedule="newbob", progress="off")


def identical(comm, array):
    """Collective: whether `array` is bitwise rank 0's on every rank."""
    root = array.copy()
    comm.Bcast(root, root=0)
    flag = np.array([np.array_equal(root, array)], dtype=np.int64)
    comm.Allreduce(MPI.IN_PLACE, [flag, MPI.INT64_T], op=MPI.MIN)
    return bool(flag[0])


@pytest.mark.parametrize("algo", psgd.ALGORITHMS)
def test_a_rejected_epoch_returns_every_rank_to_rank_0s_best_model(comm, algo, monkeypatch):
    calls = {"end_epoch": 0}
    end_epoch = Schedule.end_epoch

    def reject_the_second(self, loss):
        calls["end_epoch"] += 1
        accepted = end_epoch(self, loss)
        return False if calls["end_epoch"] == 2 else accepted

    seen = []
    rollback = DataParallel.rollback

    def watched_rollback(self, best):
        rollback(self, best)
        w = self.net.param_buffer.data
        best_on_0 = best.copy()
        self.comm.Bcast(best_on_0, root=0)
        seen.append((identical(self.comm, w), bool(np.array_equal(w, best_on_0))))

    monkeypatch.setattr(Schedule, "end_epoch", reject_the_second)
    monkeypatch.setattr(DataParallel, "rollback", watched_rollback)
    trainer = Trainer(make_config(algo=algo, **SMALL), comm)
    trainer.run()
    assert seen, "the forced rejection did not roll back"
    for replicas_identical, is_rank0_best in seen:
        assert replicas_identical and is_rank0_best
    if not trainer.parallel.server_based:   # the collective algorithms promise one final model
        assert identical(trainer.comm, trainer.parallel.net.param_buffer.data)
    trainer.close()
