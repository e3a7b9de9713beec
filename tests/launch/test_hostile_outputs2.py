"""Output paths under hostile use, round 2 (issue 25, findings 7, 8 and 21):
outputs that are one file, side files of an nnet1 --out that cannot be
written, and a full disk. Each used to lose a file silently, crash after the
last epoch, or name no file; now each is one line naming the flag and path,
before training where it can be known then."""
import os

import pytest

from kaldi_corpus import write_corpus
from launch_util import MPIRUN, ROOT, assert_clean_failure, mpirun, psgd_train

# checks of flags, files and data, whatever the MPI library: under one MPI (one_mpi)
pytestmark = [pytest.mark.timeout(120), pytest.mark.one_mpi,
              pytest.mark.skipif(not os.path.exists(MPIRUN), reason="no mpirun beside python")]

DISK_FULL = os.path.join(ROOT, "tests", "disk_full_driver.py")
QUICK = ["--model", "mlp", "--hidden", "16", "--num-samples", "600"]


def _trained_nothing(result):
    return "epoch 1/" not in result.stdout


# 7: outputs that are one file ---------------------------------------------------------
@pytest.mark.parametrize("flags,needle", [
    (["--out", "X", "--metrics", "X"], "--metrics X is also --out X"),
    (["--plot", "X.png", "--metrics", "X.png"], "--plot X.png is also --metrics X.png"),
    (["--out", "ck", "--checkpoint-dir", "ck"], "--out ck is also --checkpoint-dir ck"),
    (["--metrics", "ck/LATEST", "--checkpoint-dir", "ck"],
     "--metrics ck/LATEST is inside --checkpoint-dir ck, where checkpoints are written"),
    (["--out", "ck/epoch-0000", "--checkpoint-dir", "ck"], "is inside --checkpoint-dir ck"),
    # a FIFO stands for any device: run as root, a rename over /dev/null replaced it
    (["--out", "fifo"], "--out fifo is not a regular file"),
], ids=["out=metrics", "plot=metrics", "out=checkpoint-dir", "metrics=LATEST",
        "out-in-an-epoch-folder", "out=device"])
def test_7_outputs_that_are_one_file_are_refused_before_training(tmp_path, flags, needle):
    os.mkfifo(str(tmp_path / "fifo"))
    result = psgd_train(2, "--algo", "bsp", *QUICK, "--epochs", "2", *flags, cwd=str(tmp_path))
    assert_clean_failure(result, needle)
    assert _trained_nothing(result), result.stdout
    assert len([l for l in result.stderr.splitlines() if needle in l]) == 2   # every rank


def test_7_an_output_beside_the_checkpoints_is_fine(tmp_path):
    result = psgd_train(2, "--algo", "bsp", *QUICK, "--quiet", "--epochs", "1", "--metrics",
                        "ck/m.jsonl", "--checkpoint-dir", "ck", cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert sorted(os.listdir(str(tmp_path / "ck"))) == [".lock", "LATEST", "epoch-0000",
                                                        "m.jsonl"]


# 8: the side files of --out NAME.nnet --------------------------------------------------
@pytest.fixture(scope="module")
def kaldi_data(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("corpus"))
    train = write_corpus(folder, num_utts=12, seed=0, prefix="train")
    return ["--feats", "scp:" + train["feats.scp"], "--targets", "ark:" + train["ali.ark"],
            "--model", "mlp", "--hidden", "16", "--splice", "1"]


@pytest.mark.parametrize("side", ["final.feature_transform", "ali_train_pdf.counts"])
def test_8_a_side_file_that_cannot_be_written_fails_before_training(tmp_path, kaldi_data,
                                                                      side):
    exp = tmp_path / "exp"
    (exp / side).mkdir(parents=True)
    result = psgd_train(2, "--algo", "bsp", "--epochs", "2", *kaldi_data,
                        "--out", str(exp / "final.nnet"))
    assert_clean_failure(result, "%s (written beside --out %s) is a directory" % (
        exp / side, exp / "final.nnet"))
    assert _trained_nothing(result), result.stdout
    assert sorted(os.listdir(str(exp))) == [side]


def test_8_a_side_file_that_is_another_output_is_refused(tmp_path, kaldi_data):
    exp = tmp_path / "exp"
    result = psgd_train(2, "--algo", "bsp", "--epochs", "2", *kaldi_data,
                        "--out", str(exp / "final.nnet"),
                        "--metrics", str(exp / "ali_train_pdf.counts"))
    assert_clean_failure(result, "--metrics %s is also %s (written beside --out" % (
        exp / "ali_train_pdf.counts", exp / "ali_train_pdf.counts"))
    assert _trained_nothing(result)


def test_7_an_output_that_would_replace_an_input_is_refused(tmp_path, kaldi_data):
    targets = kaldi_data[kaldi_data.index("--targets") + 1][len("ark:"):]
    before = open(targets, "rb").read()
    result = psgd_train(2, "--algo", "bsp", "--epochs", "2", *kaldi_data, "--metrics", targets)
    assert_clean_failure(result, "--metrics %s would replace the input --targets ark:%s"
                         % (targets, targets))
    assert _trained_nothing(result)
    assert open(targets, "rb").read() == before


# 21: a full disk names the file ---------------------------------------------------------
def disk_full(folder, *argv):
    """mpirun of psgd.worker ARGV where the disk of `folder` is full."""
    return mpirun(2, [DISK_FULL, str(folder), "psgd.worker"] + list(argv), timeout=100)


@pytest.mark.parametrize("flag,name", [("--out", "m.npz"), ("--metrics", "m.jsonl"),
                                       ("--plot", "curves.png"), ("--checkpoint-dir", "LATEST")])
def test_21_a_full_disk_names_the_file_and_loses_nothing(tmp_path, flag, name):
    full = tmp_path / "full"
    full.mkdir()
    target = full / name
    value = str(full) if flag == "--checkpoint-dir" else str(target)
    if flag != "--checkpoint-dir":    # LATEST is the run's own
        target.write_text("the user's file")
    result = disk_full(full, "--algo", "bsp", *QUICK, "--quiet",
                       "--epochs", "1", flag, value)
    assert_clean_failure(result, "cannot write %s: No space left on device" % target)
    if flag != "--checkpoint-dir":
        assert target.read_text() == "the user's file"
    assert not [n for n in os.listdir(str(full)) if n.startswith(".tmp-")]
