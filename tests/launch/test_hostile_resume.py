"""Resume and start-up under hostile use (issue 25, findings 3, 5 and 23):
ranks started with different flags, a rank file from another epoch, a
checkpoint folder without LATEST (it used to start afresh and prune the
folders), a fresh run into a folder of checkpoints, a hand-edited LATEST,
and files handed to the wrong flag. Only the MPMD launch depends on the MPI
library: the rest is files, and runs under one MPI (one_mpi)."""
import json
import os
import shutil
import sys

import numpy as np
import pytest

from launch_util import MPIRUN, assert_clean_failure, mpirun, psgd_train

pytestmark = [pytest.mark.skipif(not os.path.exists(MPIRUN), reason="no mpirun beside python"),
              pytest.mark.timeout(120)]

QUICK = ["--model", "mlp", "--hidden", "16", "--num-samples", "600", "--quiet"]
TRAIN = ["-m", "psgd.worker"] + QUICK


def mpmd(first, second, timeout=60):
    """One rank with flags `first`, one with `second` (an MPMD launch)."""
    return mpirun(1, TRAIN + first + [":", "-np", "1", sys.executable] + TRAIN + second,
                  timeout=timeout)


def model(path):
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files if k != "__header__"}


@pytest.fixture
def ck(tmp_path):
    """A folder with the checkpoints of epochs 2 and 3 of a 3-epoch bsp run."""
    path = str(tmp_path / "ck")
    result = psgd_train(2, *QUICK, "--epochs", "3", "--checkpoint-dir", path)
    assert result.returncode == 0, result.stderr
    assert sorted(os.listdir(path)) == [".lock", "LATEST", "epoch-0001", "epoch-0002"]
    return path


@pytest.mark.parametrize("first,second,needle", [
    (["--epochs", "2"], ["--epochs", "3"], "--epochs 2 vs 3"),
    (["--epochs", "2"], ["--epochs", "2", "--num-samples", "800"], "--num-samples 600 vs 800"),
], ids=["epochs", "num-samples"])
def test_ranks_started_with_different_flags_fail_together(first, second, needle):
    """Finding 3: different --epochs hung; different --num-samples trained
    two data sets."""
    result = mpmd(first, second)
    assert_clean_failure(result, "a flag differs between rank 0 and rank 1: " + needle)
    assert result.returncode == 2, result.stderr


@pytest.mark.one_mpi
def test_a_rank_file_from_another_epoch_is_named(ck):
    """Finding 3: rank 1 resumed at another epoch than rank 0 and the job hung."""
    shutil.copy(os.path.join(ck, "epoch-0001", "rank-00001.npz"),
                os.path.join(ck, "epoch-0002", "rank-00001.npz"))
    result = psgd_train(2, *QUICK, "--epochs", "4", "--checkpoint-dir", ck, "--resume",
                        timeout=60)
    assert_clean_failure(result, "rank-00001.npz is not rank 1's checkpoint of epoch 3 in a "
                                 "job of 2 ranks (it says: epoch 2, rank 1 of 2)")


@pytest.mark.one_mpi
def test_resume_without_latest_takes_the_newest_complete_folder(ck, tmp_path):
    """Finding 5: without LATEST, --resume started afresh and pruned the
    checkpoints; it now resumes from the newest folder every rank's file
    completes, and ends with the model of an uninterrupted run."""
    ref = str(tmp_path / "ref.npz")
    assert psgd_train(2, *QUICK, "--epochs", "4", "--out", ref).returncode == 0
    os.remove(os.path.join(ck, "LATEST"))
    os.remove(os.path.join(ck, "epoch-0002", "rank-00001.npz"))    # torn: not this one
    out = str(tmp_path / "out.npz")
    result = psgd_train(2, *[f for f in QUICK if f != "--quiet"], "--epochs", "4",
                        "--checkpoint-dir", ck, "--resume", "--out", out)
    assert result.returncode == 0, result.stderr
    assert "--resume: %s has no LATEST: resuming from epoch-0001" % ck in result.stdout
    assert "resumed from epoch 2 of" in result.stdout
    a, b = model(ref), model(out)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


@pytest.mark.one_mpi
def test_resume_without_latest_or_a_complete_folder_refuses_and_keeps_them(ck):
    os.remove(os.path.join(ck, "LATEST"))
    for folder in ("epoch-0001", "epoch-0002"):
        os.remove(os.path.join(ck, folder, "rank-00001.npz"))
    result = psgd_train(2, *QUICK, "--epochs", "4", "--checkpoint-dir", ck, "--resume",
                        timeout=60)
    assert_clean_failure(result, "--resume: %s has no LATEST and no checkpoint that every "
                                 "rank's file completes (found epoch-0001, epoch-0002)" % ck)
    assert sorted(os.listdir(ck)) == [".lock", "epoch-0001", "epoch-0002"]
    assert os.listdir(os.path.join(ck, "epoch-0002")) == ["rank-00000.npz"]


@pytest.mark.one_mpi
def test_a_fresh_run_into_a_folder_of_checkpoints_is_refused(ck):
    """Without --resume the run would overwrite LATEST and prune the folders."""
    before = open(os.path.join(ck, "LATEST")).read()
    result = psgd_train(2, *QUICK, "--epochs", "4", "--checkpoint-dir", ck, timeout=60)
    assert_clean_failure(result, "--checkpoint-dir %s holds checkpoints (epoch-0001, "
                                 "epoch-0002): add --resume" % ck)
    assert open(os.path.join(ck, "LATEST")).read() == before


@pytest.mark.one_mpi
def test_a_hand_edited_latest_is_named(ck):
    """Finding 23: a size written as text gave 'written by 2 ranks, this job has 2'."""
    with open(os.path.join(ck, "LATEST"), "w") as f:
        json.dump({"folder": "epoch-0002", "size": "2"}, f)
    result = psgd_train(2, *QUICK, "--epochs", "4", "--checkpoint-dir", ck, "--resume",
                        timeout=60)
    assert_clean_failure(result, "%s: not a psgd checkpoint pointer" % os.path.join(ck, "LATEST"))


@pytest.mark.one_mpi
def test_a_negative_seed_names_the_flag():
    result = psgd_train(2, *QUICK, "--epochs", "1", "--seed", "-1", timeout=60)
    assert_clean_failure(result, "--seed must be in [0, 2^32 - 1], got -1")


@pytest.mark.one_mpi
def test_init_with_a_checkpoint_file_names_it(ck):
    path = os.path.join(ck, "epoch-0002", "rank-00000.npz")
    result = psgd_train(2, "--num-samples", "600", "--quiet", "--epochs", "1", "--init", path,
                        timeout=60)
    assert_clean_failure(result, "%s is a checkpoint file (rank 0's of epoch 3), not a model"
                         % path)


@pytest.mark.one_mpi
def test_a_file_that_is_no_archive_is_not_called_pickled(tmp_path):
    """Finding 23: NumPy calls every file that is neither .npy nor a zip
    archive pickled; a file starting with 'PK' was 'pickled Python objects'."""
    path = tmp_path / "m.npz"
    path.write_bytes(b"PKnot a zip archive")
    result = psgd_train(2, "--num-samples", "600", "--quiet", "--epochs", "1", "--init",
                        str(path), timeout=60)
    assert_clean_failure(result, "%s: not a readable psgd model/checkpoint (not an .npz "
                                 "archive)" % path)
