"""--resume at another number of ranks and --servers (issue 30, item 1),
as whole jobs: each algorithm's run hops 4 -> 2 -> 4 -> 5 -> 3 ranks, one
epoch per job (the server algorithms' --servers go 2 -> 1 -> 1 -> 2 -> 1).
At every hop each rank checks, once the resume is set up, that its model
is exactly the checkpoint's global model (w_g, the same in every rank's
file; or the servers' center shards end to end) and its global algorithm
state exactly the checkpoint's; the metrics file goes on, the accuracy
improves over the hops, and the log says what the new N changed. psgd's
own file logic, so under one MPI (one_mpi)."""
import glob
import json
import os

import pytest

from launch_util import MPIRUN, assert_clean_failure, mpirun, psgd_train

pytestmark = [pytest.mark.skipif(not os.path.exists(MPIRUN), reason="no mpirun beside python"),
              pytest.mark.one_mpi, pytest.mark.timeout(240)]

QUICK = ["--model", "mlp", "--hidden", "32", "--num-samples", "1500"]
HOPS = (4, 2, 4, 5, 3)
SERVERS = (2, 1, 1, 2, 1)      # the server algorithms': 2 -> 1 and 1 -> 2 on the way
# The first hop's line of what the new N changed: bsp's large-batch rule
# (Adam at 4 workers x3, at 2 x2), easgd's alpha max(0.9 / N, 0.3) (2
# workers 0.45, 1 worker 0.9) and rule; sod's outer_lr 0.7 * min(1, N / 4)
# would change too, but a flag given stays as given.
FIRST_HOP = {"bsp": "defaults for 2 workers: lr 0.006 -> 0.004",
             "easgd": "defaults for 1 workers: lr 0.004 -> 0.002, alpha 0.45 -> 0.9",
             "sod": "defaults for 2 workers: lr 0.004 -> 0.002828"}
SERVER_ALGOS = ("easgd", "asgd", "masgd")

# The job at each hop: psgd.worker, with a check after Trainer.setup.
CHECK = r'''
import glob, json, os, sys
import numpy as np
from psgd import worker
from psgd.buffers import shard_bounds
from psgd.train import trainer

ck = sys.argv[1]
folder = os.path.join(ck, json.load(open(os.path.join(ck, "LATEST")))["folder"])


def saved():
    files = []
    for path in sorted(glob.glob(os.path.join(folder, "rank-*.npz"))):
        with np.load(path) as z:
            arrays = {k: z[k] for k in z.files}
        files.append((arrays, json.loads(arrays.pop("__header__").tobytes().decode())))
    return files


def check(self):
    files, p = saved(), self.parallel
    sync, names = p.sync, p.net.param_names
    old_servers = (files[0][1]["config"]["servers"] or 1) if p.server_based else 0
    flat = lambda arrays: np.concatenate([arrays["net/" + n].ravel() for n in names])
    if old_servers:
        model = np.concatenate([files[s][0]["algo/center"] for s in range(old_servers)])
        np.testing.assert_array_equal(flat(files[0][0]), model)    # rank 0 gathered them
    else:
        model = flat(files[0][0])
        for arrays, _ in files:                                     # w_g: on every rank
            np.testing.assert_array_equal(flat(arrays), model)
    np.testing.assert_array_equal(np.asarray(p.net.param_buffer.data), model)
    keys = []
    for key, value in sync.state_dict().items():
        if not sync.is_global_state(key):
            continue
        if key in sync.SHARDED_STATE:
            whole = np.concatenate([files[s][0]["algo/" + key] for s in range(old_servers)],
                                   axis=-1)
            lo, hi = shard_bounds(model.size, p.servers)[self.rank]
            expected = whole[..., lo:hi]
        else:
            expected = files[0][0]["algo/" + key]
        np.testing.assert_array_equal(value, expected, err_msg=key)
        keys.append(key)
    opt = p.optimizer.state_dict()
    for slot in p.optimizer.slots:     # syncgrad's are the same on every rank: kept
        if p.gradients_averaged:
            np.testing.assert_array_equal(opt[slot], files[0][0]["opt/" + slot])
        else:
            assert opt[slot] is None and opt["t"] == 0, (slot, opt["t"])
    print("resume-check rank %d: the checkpoint's model, state %s" % (
        self.rank, ",".join(keys)), flush=True)


setup = trainer.Trainer.setup
def checked_setup(self):
    setup(self)
    check(self)
trainer.Trainer.setup = checked_setup
sys.exit(worker.main(sys.argv[2:]))
'''


def hop(np_, ck, flags, epochs, check=True):
    argv = ["-m", "psgd.worker"] if not check else ["-c", CHECK, ck]
    return mpirun(np_, argv + QUICK + flags + ["--epochs", str(epochs), "--checkpoint-dir", ck],
                  timeout=200)


def accuracies(path):
    with open(path) as f:
        return [json.loads(line)["test_accuracy"] for line in f]


@pytest.mark.parametrize("algo", ["bsp", "bmuf", "sod", "syncgrad", "easgd", "asgd", "masgd"])
def test_resume_hops_across_rank_counts(algo, tmp_path):
    ck, metrics = str(tmp_path / "ck"), str(tmp_path / "m.jsonl")
    flags = ["--algo", algo, "--metrics", metrics]
    if algo == "masgd":
        flags += ["--masgd-scope", "global"]       # a global velocity, carried over
    if algo == "sod":
        flags += ["--outer-lr", "0.5"]
    servers = [["--servers", str(s)] if algo in SERVER_ALGOS else [] for s in SERVERS]
    first = hop(HOPS[0], ck, flags + servers[0] + ["--quiet"], 1, check=False)
    assert first.returncode == 0, first.stderr
    for epoch, (before, size) in enumerate(zip(HOPS, HOPS[1:]), start=2):
        result = hop(size, ck, flags + servers[epoch - 1] + ["--resume"], epoch)
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
        assert result.stdout.count("resume-check rank") == size, result.stdout
        assert "the checkpoint's %d ranks" % before in result.stdout, result.stdout
        assert "resume: the local optimizer's state" in result.stdout, result.stdout
        if epoch == 2 and algo in FIRST_HOP:
            line = [l for l in result.stdout.splitlines() if "defaults for" in l]
            assert line and line[0].endswith(FIRST_HOP[algo]), result.stdout
    acc = accuracies(metrics)
    assert len(acc) == len(HOPS), acc                            # the metrics file went on
    assert acc[-1] > acc[0] + 0.03, acc                          # and it trained on


@pytest.fixture
def sharded(tmp_path):
    """The checkpoints of a 2-epoch asgd run on 4 ranks, 2 of them servers."""
    ck = str(tmp_path / "ck")
    result = hop(4, ck, ["--algo", "asgd", "--servers", "2", "--quiet"], 2, check=False)
    assert result.returncode == 0, result.stderr
    return ck


@pytest.mark.parametrize("before,after", [(2, 1), (1, 2)], ids=["2-to-1", "1-to-2"])
def test_only_the_servers_change_on_the_same_ranks(tmp_path, before, after):
    """Ranks 1-3 have files of their own there, which are not the model."""
    ck, flags = str(tmp_path / "ck"), ["--algo", "masgd", "--masgd-scope", "global"]
    assert hop(4, ck, flags + ["--servers", str(before), "--quiet"], 1,
               check=False).returncode == 0
    result = hop(4, ck, flags + ["--servers", str(after), "--resume"], 2)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert result.stdout.count("resume-check rank") == 4, result.stdout
    assert "cut for %d" % after in result.stdout, result.stdout


def test_a_checkpoint_that_kept_no_average_resumes_at_another_size(tmp_path):
    """A job whose model was the center (--average-examples 0, or one from
    before the average) resized into one that keeps the average: it starts
    at the center."""
    ck, metrics = str(tmp_path / "ck"), str(tmp_path / "m.jsonl")
    flags = ["--algo", "asgd", "--metrics", metrics, "--quiet"]
    assert hop(4, ck, flags + ["--servers", "2", "--average-examples", "0"], 1,
               check=False).returncode == 0
    result = hop(3, ck, flags + ["--resume"], 2, check=False)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert len(accuracies(metrics)) == 2


def test_without_latest_another_size_takes_the_newest_complete_folder(sharded):
    os.remove(os.path.join(sharded, "LATEST"))
    os.remove(os.path.join(sharded, "epoch-0001", "rank-00003.npz"))    # torn: not this one
    result = psgd_train(3, *QUICK, "--algo", "asgd", "--epochs", "3", "--checkpoint-dir",
                        sharded, "--resume")
    assert result.returncode == 0, result.stderr
    assert "has no LATEST: resuming from epoch-0000" in result.stdout, result.stdout
    assert "resumed from epoch 1 of" in result.stdout, result.stdout


def test_a_missing_shard_file_is_named_on_every_rank(sharded):
    path = os.path.join(sharded, "epoch-0001", "rank-00001.npz")
    os.remove(path)
    result = psgd_train(3, *QUICK, "--algo", "asgd", "--epochs", "2", "--checkpoint-dir",
                        sharded, "--resume", "--quiet")
    assert_clean_failure(result, "%s: no such file" % path)


def test_servers_that_leave_no_worker_are_refused_before_the_resume(sharded):
    result = psgd_train(2, *QUICK, "--algo", "asgd", "--servers", "2", "--epochs", "2",
                        "--checkpoint-dir", sharded, "--resume", "--quiet")
    assert_clean_failure(result, "--servers 2 leaves no worker: run with mpirun -np 3 or more")
    assert sorted(os.listdir(os.path.join(sharded, "epoch-0001"))) == [
        "rank-%05d.npz" % r for r in range(4)]


def test_a_model_parallel_checkpoint_resumes_only_on_its_own_ranks(tmp_path):
    ck, flags = str(tmp_path / "ck"), ["--model-parallel", "--quiet"]
    assert psgd_train(2, *QUICK, *flags, "--epochs", "1", "--checkpoint-dir",
                      ck).returncode == 0
    result = psgd_train(1, *QUICK, *flags, "--epochs", "2", "--checkpoint-dir", ck, "--resume")
    assert_clean_failure(result, "holds a --model-parallel checkpoint of 2 ranks, this job has 1")
