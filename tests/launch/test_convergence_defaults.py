"""The convergence defaults end to end: the server's staleness in the closing
log line and in --metrics, and the large-batch rate (start-up line, warm-up
per epoch, --no-lr-scaling)."""
import json
import re

import pytest

from launch_util import assert_clean_failure, psgd_train
from psgd.train.schedule import Schedule

# what it checks (accuracy, numerics, files) does not depend on the MPI library
pytestmark = [pytest.mark.timeout(300), pytest.mark.one_mpi]

QUICK = ["--model", "mlp", "--hidden", "32", "--num-samples", "600", "--progress", "off"]


def rows_of(path):
    return [json.loads(line) for line in open(path)]


def test_staleness_in_the_closing_line_and_the_metrics(tmp_path):
    metrics = str(tmp_path / "m.jsonl")
    r = psgd_train(4, "--algo", "asgd", "--epochs", "1", *QUICK, "--metrics", metrics)
    assert r.returncode == 0, r.stderr
    row = rows_of(metrics)[-1]
    hist = row["staleness_hist"]
    assert sum(hist) > 0 and hist[-1] > 0 and row["staleness_max"] == len(hist) - 1
    assert row["staleness_mean"] == pytest.approx(
        sum(i * c for i, c in enumerate(hist)) / sum(hist))
    line = re.search(r"staleness mean ([0-9.]+), max (\d+)", r.stdout)
    assert line, r.stdout
    assert float(line.group(1)) == pytest.approx(row["staleness_mean"], abs=0.005)
    assert int(line.group(2)) == row["staleness_max"]


def test_the_large_batch_rate_warms_up_and_can_be_turned_off(tmp_path):
    metrics = str(tmp_path / "m.jsonl")
    r = psgd_train(2, "--algo", "bsp", "--epochs", "3", *QUICK, "--metrics", metrics)
    assert r.returncode == 0, r.stderr
    assert "adam lr 0.004 beta1 0.9 (linear to 3x, then square-root rule: x2.00 for 2 workers" in r.stdout
    k = 2.0
    anneal = Schedule("anneal", 1.0)          # the default schedule, over the warm-up
    expected = [0.002 * (1 + (k - 1) * min(1, e / 3)) * anneal.fraction(e - 1, 3)
                for e in (1, 2, 3)]
    assert [row["lr"] for row in rows_of(metrics)] == pytest.approx(expected)
    r = psgd_train(2, "--algo", "bsp", "--epochs", "1", *QUICK, "--metrics", metrics,
                   "--no-lr-scaling")
    assert r.returncode == 0, r.stderr
    assert "adam lr 0.002 beta1 0.9\n" in r.stdout and "rule" not in r.stdout
    assert rows_of(metrics)[0]["lr"] == pytest.approx(0.002)


def assert_two_epochs_at(tmp_path, np_, algo, lr, options_line, rate_line):
    """The start-up lines of `--algo algo` at np_, and two epochs at the
    rule's rate from the first (no warm-up)."""
    metrics = str(tmp_path / "m.jsonl")
    r = psgd_train(np_, "--algo", algo, "--epochs", "2", *QUICK, "--metrics", metrics)
    assert r.returncode == 0, r.stderr
    assert options_line in r.stdout
    assert rate_line + "workers, reached after 0 warm-up epochs)\n" in r.stdout
    assert [row["lr"] for row in rows_of(metrics)] == pytest.approx([lr] * 2)


def test_asgd_adds_the_mean_delta_compensated_at_4x_the_rate_at_4_workers(tmp_path):
    """docs/algorithms.md, the trainer's defaults by N: the sum of the deltas
    collapsed, the mean without compensation spiked."""
    assert_two_epochs_at(tmp_path, 5, "asgd", 0.008,
                         "asgd for 4 workers: a sync every 128 samples, alpha 0.25, "
                         "staleness_compensation dc",
                         "adam lr 0.008 beta1 0.7 (asgd 3x to 3 workers, then max(4, N/2) "
                         "rule: x4.00 for 4 ")
    r = psgd_train(3, "--algo", "asgd", "--epochs", "1", *QUICK, "--momentum", "0.8",
                   "--optimizer", "nesterov", "--staleness-compensation", "none")
    assert r.returncode == 0, r.stderr
    assert "alpha 0.5, staleness_compensation none" in r.stdout
    assert ("nesterov lr 0.06 momentum 0.8 (asgd 3x to 3 workers, then max(4, N/2) rule: "
            "x3.00") in r.stdout


def test_bmuf_lightens_its_workers_momentum_under_the_block_momentum(tmp_path):
    """docs/algorithms.md, the trainer's defaults by N: Adam's beta1 0.9
    under bmuf's block momentum ended further from one worker and fell up
    to 7.8 points between two epochs at 8 workers; a given --momentum wins."""
    assert_two_epochs_at(tmp_path, 4, "bmuf", 0.004,
                         "bmuf for 4 workers: a sync every 128 samples, block_momentum 0.5, "
                         "reset_local_state False",
                         "adam lr 0.004 beta1 0.5 (bmuf N/4 rule: x2.00 for 4 ")
    r = psgd_train(2, "--algo", "bmuf", "--epochs", "1", *QUICK, "--momentum", "0.9")
    assert r.returncode == 0, r.stderr
    assert "adam lr 0.002 beta1 0.9\n" in r.stdout


def test_a_momentum_for_an_optimizer_without_one_is_an_error():
    r = psgd_train(2, "--algo", "bsp", "--epochs", "1", *QUICK, "--optimizer", "sgd",
                   "--momentum", "0.5")
    assert_clean_failure(r, "optimizer 'sgd' does not take momentum")


def test_masgd_adds_the_mean_delta_from_4_workers_at_2_root_n_the_rate(tmp_path):
    """docs/algorithms.md: masgd's sum with momentum 0.9 fell up to 7.7 points
    between two epochs from 4 workers; a given momentum sets the gain."""
    assert_two_epochs_at(tmp_path, 6, "masgd", 0.002 * 2 * 5 ** 0.5,
                         "masgd for 5 workers: a sync every 128 samples, alpha 0.1, "
                         "momentum 0.5, staleness_compensation dc",
                         "adam lr 0.00894427 beta1 0.9 (masgd 2 sqrt(N) rule: x4.47 "
                         "for 5 ")
    r = psgd_train(5, "--algo", "masgd", "--epochs", "1", *QUICK, "--masgd-momentum", "0.9")
    assert r.returncode == 0, r.stderr
    assert "a sync every 128 samples, alpha 0.025, momentum 0.9," in r.stdout
    r = psgd_train(4, "--algo", "masgd", "--epochs", "1", *QUICK)
    assert r.returncode == 0, r.stderr
    # the model kept: the center averaged over a quarter of the 480 training examples
    assert ("a sync every 1024 samples, staleness_compensation dc, the model kept: the "
            "center averaged over 120 examples\n") in r.stdout
    assert "adam lr 0.002 beta1 0.9\n" in r.stdout
