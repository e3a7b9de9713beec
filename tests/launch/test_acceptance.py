"""The trainer's acceptance on the embedded data, with every default: each
algorithm trains the default CNN to at least 80% held-out accuracy, the
README's main command (easgd at np 5) to at least 85%, and the mlp to at
least 60%. Accuracy is asserted, never time."""
import json

import pytest

from launch_util import psgd_train

pytestmark = pytest.mark.timeout(300)


def final_accuracy(tmp_path, np_, *flags):
    metrics = str(tmp_path / "m.jsonl")
    r = psgd_train(np_, *flags, "--metrics", metrics, "--quiet", timeout=280)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [json.loads(line) for line in open(metrics)]
    assert rows[-1]["epoch"] == 30  # the default number of epochs
    return rows[-1]["test_accuracy"]


@pytest.mark.parametrize("algo", ["bsp", "bmuf", "sod", "syncgrad", "easgd", "asgd", "masgd"])
def test_every_algorithm_trains_the_default_model(tmp_path, algo):
    assert final_accuracy(tmp_path, 3, "--algo", algo) >= 0.80


def test_the_main_command_reaches_85_percent(tmp_path):
    assert final_accuracy(tmp_path, 5, "--algo", "easgd") >= 0.85


def test_the_mlp_reaches_60_percent(tmp_path):
    assert final_accuracy(tmp_path, 3, "--model", "mlp") >= 0.60
