"""Work shares by speed under mpirun (psgd/train/shares.py): with one
worker's compute slowed (tests/fault_driver.py), the server algorithms'
other workers take more of each epoch and the slow one less, the epoch is
still the training set, and a checkpoint keeps where each worker's
shard walk stands. With --work-shares equal every worker takes its shard."""
import json
import os

import numpy as np
import pytest

from launch_util import MPIRUN, mpirun

pytestmark = pytest.mark.skipif(not os.path.exists(MPIRUN), reason="no mpirun beside python")

QUICK = ["--model", "mlp", "--hidden", "32", "--num-samples", "1000"]   # 800 to train
EPOCHS = 4
SLOW = 2            # a worker: rank 0 serves ranks 1-3


def run(tmp_path, driver, algo, *flags):
    """(steps per rank over the run, metrics rows, stdout + stderr)."""
    dump = tmp_path / "dump"
    dump.mkdir()
    # every step of the slow rank takes 5x as long and 20 ms more, so that it
    # stays the slow one when oversubscribed ranks' syncs vary by milliseconds
    fault = {"what": "slow", "factor": 4, "seconds": 0.02, "rank": SLOW, "dump": str(dump)}
    result = mpirun(4, [driver, json.dumps(fault), "--algo", algo, *QUICK, "--epochs",
                        str(EPOCHS), "--metrics", str(tmp_path / "m.jsonl"), *flags],
                    timeout=150)
    assert result.returncode == 0, result.stderr[-3000:]
    steps = {}
    for rank in range(1, 4):
        with open(dump / ("rank-%d.json" % rank)) as f:
            steps[rank] = len(json.load(f))
    with open(tmp_path / "m.jsonl") as f:
        rows = [json.loads(line) for line in f]
    return steps, rows, result.stdout + result.stderr


@pytest.mark.timeout(180)
@pytest.mark.parametrize("algo", ["easgd", "asgd", "masgd"])
def test_a_slow_worker_takes_less_of_each_epoch(tmp_path, driver, algo):
    steps, rows, log = run(tmp_path, driver, algo)
    fast = [steps[r] for r in (1, 3)]
    # epoch 1 is equal (9 minibatches each), then the slow worker's share
    # shrinks toward a fifth of the others'
    assert steps[SLOW] < 0.7 * min(fast), steps
    assert [r["samples"] for r in rows] == [800 * (e + 1) for e in range(EPOCHS)], rows
    named = [line for line in log.splitlines() if "work shares by speed" in line]
    assert named and all(line.endswith("(rank %d slowest)" % SLOW) for line in named), log


@pytest.mark.one_mpi
@pytest.mark.timeout(180)
def test_equal_shares_keep_each_worker_on_its_shard(tmp_path, driver):
    steps, rows, log = run(tmp_path, driver, "easgd", "--work-shares", "equal")
    assert steps == {1: EPOCHS * 9, 2: EPOCHS * 9, 3: EPOCHS * 9}, steps
    assert "work shares" not in log


SHARDS = [267, 267, 266]     # 800 examples over ranks 1-3


def places(ck, epoch):
    """Each worker's examples walked, from its checkpoint of `epoch`."""
    walked = []
    for rank, shard in zip(range(1, 4), SHARDS):
        with np.load(os.path.join(ck, "epoch-%04d" % epoch, "rank-%05d.npz" % rank)) as z:
            p, q = json.loads(z["__header__"].tobytes())["stream"]
        walked.append(p * shard + q)
    return walked


@pytest.mark.one_mpi
@pytest.mark.timeout(180)
def test_a_checkpoint_keeps_each_workers_place_and_a_resume_goes_on_from_it(tmp_path, driver):
    ck = str(tmp_path / "ck")
    steps, rows, _ = run(tmp_path, driver, "easgd", "--checkpoint-dir", ck)
    before = places(ck, EPOCHS - 1)
    assert sum(before) == 800 * EPOCHS and before[SLOW - 1] < 0.7 * max(before), before
    dump = tmp_path / "again"
    dump.mkdir()
    result = mpirun(4, [driver, json.dumps({"what": "none", "dump": str(dump)}), "--algo",
                        "easgd", *QUICK, "--epochs", str(EPOCHS + 1), "--checkpoint-dir", ck,
                        "--resume"], timeout=150)
    assert result.returncode == 0, result.stderr[-3000:]
    # the resumed epoch takes equal shares, from where each worker stood
    after = places(ck, EPOCHS)
    assert after == [b + s for b, s in zip(before, SHARDS)], (before, after)
