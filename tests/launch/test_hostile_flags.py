"""Flags under hostile use (issue 13, findings 3 and 15): a float flag that
is not finite fails at parse time; a flag that would do nothing is an
error (a warning for --gpu-ids on numpy); a resumed run whose flags differ
from its checkpoint's either refuses, or applies the new value and says so."""
import json
import os

import pytest

from launch_util import MPIRUN, assert_clean_failure, psgd_train
from psgd.train.schedule import Schedule

# checks of flags, files and data, whatever the MPI library: under one MPI (one_mpi)
pytestmark = [pytest.mark.skipif(not os.path.exists(MPIRUN), reason="no mpirun beside python"),
              pytest.mark.one_mpi]

QUICK = ["--model", "mlp", "--hidden", "16", "--num-samples", "600", "--quiet"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("flags,needle", [
    (["--stall-timeout", "nan"], "argument --stall-timeout: 'nan' is not a finite"),
    (["--lr", "inf"], "argument --lr: 'inf' is not a finite"),
    (["--algo", "syncgrad", "--lr", "1e300"], "argument --lr: '1e300' is not a finite"),
    (["--algo", "easgd", "--alpha=-inf"], "argument --alpha: '-inf' is not a finite"),
    (["--weight-decay", "nan"], "argument --weight-decay: 'nan' is not a finite"),
], ids=lambda v: str(v))
def test_a_non_finite_float_flag_fails_at_parse_time(flags, needle):
    result = psgd_train(3, *QUICK, "--epochs", "1", *flags)
    assert result.returncode == 2, result.stderr
    assert_clean_failure(result, needle)
    assert "non-finite model" not in result.stderr and "epoch 1/" not in result.stdout


@pytest.mark.timeout(60)
@pytest.mark.parametrize("flags,needle", [
    (["--num-classes", "3"], "--num-classes applies to Kaldi data"),
    (["--cv-feats", "scp:x.scp", "--cv-targets", "y.txt"], "--cv-feats applies to Kaldi data"),
    (["--splice", "5"], "--splice applies to Kaldi data"),
    (["--sync-bn"], "--sync-bn applies to --model-parallel only"),
    (["--no-cmvn"], "--no-cmvn applies to Kaldi data"),
    (["--lr-decay", "0.5"], "--lr-decay applies to --lr-schedule exponential; the schedule is "
                            "anneal"),
    (["--algo", "bmuf", "--compression-block", "64"],
     "bmuf: option compression_block=64 applies only with compression"),
    (["--algo", "sod", "--outer-beta1", "0.8"], "sod: option beta1=0.8 applies to outer=adam"),
], ids=lambda v: str(v))
def test_a_flag_that_would_do_nothing_is_an_error(flags, needle):
    result = psgd_train(2, *QUICK, "--epochs", "1", *flags)
    assert_clean_failure(result, needle)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("var,value", [("PSGD_MPI_CHUNK", "1e6"),
                                       ("PSGD_MPI_PIPELINE_CHUNK", "0"),
                                       ("PSGD_MPI_PIPELINE_THRESHOLD", "big"),
                                       ("PSGD_MPI_SERVER_PIECE", "-1")])
def test_a_bad_mpi_environment_variable_is_one_line(var, value):
    result = psgd_train(2, *QUICK, "--epochs", "1", env={var: value})
    assert_clean_failure(result, "%s=%r: must be a whole number" % (var, value))


@pytest.mark.timeout(60)
def test_gpu_ids_on_numpy_is_a_warning():
    result = psgd_train(2, *QUICK, "--epochs", "1", "--gpu-ids", "0,1",
                        env={"PSGD_BACKEND": "numpy"})
    assert result.returncode == 0, result.stderr
    assert "warning: rank 0: --gpu-ids 0,1 has no effect on the numpy backend" in result.stderr


@pytest.mark.timeout(60)
@pytest.mark.parametrize("flags,needle", [
    (["--exchange", "nccl"], "exchange nccl: NCCL cannot serve this job: ranks 0, 1 (host "),
    (["--exchange", "nccl", "--algo", "easgd"], "exchange nccl: easgd is a server algorithm"),
    (["--exchange", "gloo"], "argument --exchange: invalid choice: 'gloo'"),
], ids=lambda v: str(v))
def test_an_exchange_that_cannot_work_is_one_line(flags, needle):
    result = psgd_train(2, *QUICK, "--epochs", "1", *flags, env={"PSGD_BACKEND": "numpy"})
    assert_clean_failure(result, needle)


@pytest.mark.timeout(60)
def test_model_flags_that_disagree_with_init_are_an_error(tmp_path):
    model = str(tmp_path / "m.npz")
    assert psgd_train(2, *QUICK, "--epochs", "0", "--out", model).returncode == 0
    result = psgd_train(2, "--model", "mlp", "--hidden", "64", "--num-samples", "600",
                        "--epochs", "1", "--init", model)
    assert_clean_failure(result, "--hidden 64 disagrees with --init %s, whose model has "
                                 "--hidden 16" % model)
    same = psgd_train(2, *QUICK, "--epochs", "1", "--init", model)
    assert same.returncode == 0, same.stderr


@pytest.fixture
def checkpointed(tmp_path):
    ck = str(tmp_path / "ck")
    first = psgd_train(2, "--algo", "asgd", *QUICK, "--epochs", "2", "--lr", "0.002",
                       "--checkpoint-dir", ck)
    assert first.returncode == 0, first.stderr
    return ck


@pytest.mark.timeout(90)
def test_resume_with_a_new_lr_applies_it_and_says_so(checkpointed, tmp_path):
    metrics = str(tmp_path / "m.jsonl")
    result = psgd_train(2, "--algo", "asgd", "--model", "mlp", "--hidden", "16",
                        "--num-samples", "600", "--epochs", "3", "--lr", "0.5",
                        "--checkpoint-dir", checkpointed, "--resume", "--metrics", metrics)
    assert result.returncode == 0, result.stderr
    assert "resume: --lr 0.5 (the checkpoint's was 0.002) takes effect" in result.stdout
    rows = [json.loads(line) for line in open(metrics)]
    # the last epoch of 3 under the default anneal
    assert rows[-1]["epoch"] == 3, rows
    assert rows[-1]["lr"] == pytest.approx(0.5 * Schedule("anneal", 1.0).fraction(2, 3)), rows


@pytest.mark.timeout(90)
def test_resume_with_a_new_momentum_sets_adams_beta1_and_says_so(checkpointed):
    result = psgd_train(2, "--algo", "asgd", "--model", "mlp", "--hidden", "16",
                        "--num-samples", "600", "--epochs", "3", "--lr", "0.002",
                        "--momentum", "0.7", "--checkpoint-dir", checkpointed, "--resume")
    assert result.returncode == 0, result.stderr
    assert "resume: --momentum 0.7 (the checkpoint's was 0.9) takes effect" in result.stdout


@pytest.mark.timeout(90)
@pytest.mark.parametrize("flags,needle", [
    (["--algo", "bsp"], "--resume: --algo bsp differs from the checkpoint's asgd"),
    (["--algo", "easgd"], "--resume: --algo easgd differs from the checkpoint's asgd"),
    (["--algo", "asgd", "--num-samples", "800"],
     "--resume: --num-samples 800 differs from the checkpoint's 600"),
    (["--algo", "asgd", "--optimizer", "sgd"],
     "--resume: --optimizer sgd differs from the checkpoint's adam"),
], ids=lambda v: str(v))
def test_resume_with_flags_that_contradict_the_checkpoint_is_an_error(checkpointed, flags,
                                                                         needle):
    args = [a for a in QUICK if a != "600" and a != "--num-samples"]
    if "--num-samples" not in flags:
        args += ["--num-samples", "600"]
    result = psgd_train(2, *args, *flags, "--epochs", "3", "--checkpoint-dir", checkpointed,
                        "--resume")
    assert_clean_failure(result, needle)
    # every rank failed together: nobody is stopped or aborted at exit
    assert result.returncode == 2 and "psgd: " not in result.stderr.replace(
        "psgd-train: error", ""), result.stderr
