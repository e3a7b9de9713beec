"""`python -m psgd.train.newbob`: the newbob step bin/train_scheduler.sh
calls, so the shell scheduler has no newbob of its own."""
import json
import os
import subprocess
import sys

import pytest

from psgd.train.newbob import main
from psgd.train.schedule import Schedule

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))


def start(state, **rates):
    assert main([str(state)] + ["--%s=%s" % (k.replace("_", "-"), v)
                                for k, v in rates.items()]) == 0


def step(capsys, state, loss):
    assert main([str(state), repr(loss)]) == 0
    verdict, lr, done = capsys.readouterr().out.split()
    return verdict, float(lr), done == "1"


def refused(capsys, argv):
    """The one error line of a refused call (exit status 2, nothing on stdout)."""
    with pytest.raises(SystemExit) as exit_:
        sys.exit(main([str(a) for a in argv]))
    out, err = capsys.readouterr()
    assert exit_.value.code == 2 and out == "", (out, err)
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_the_cli_steps_exactly_like_the_trainers_schedule(tmp_path, capsys):
    state = tmp_path / "newbob.json"
    losses = [2.0, 1.5, 1.6, 1.495, 1.494, 1.4939]
    start(state, lr=0.1, start_halving_impr=0.01, end_halving_impr=0.001, halving_factor=0.5)
    reference = Schedule("newbob", 0.1, start=0.01, end=0.001, factor=0.5)
    for loss in losses:
        got = step(capsys, state, loss)
        accepted = reference.end_epoch(loss)
        assert got == ("accepted" if accepted else "rejected", reference.lr, reference.done)
    assert reference.done          # the sequence reaches the end of halving


def test_a_worse_loss_is_rejected_and_halves_the_rate(tmp_path, capsys):
    state = tmp_path / "newbob.json"
    start(state, lr=0.2)
    assert step(capsys, state, 1.0) == ("accepted", 0.2, False)
    assert step(capsys, state, 1.1) == ("rejected", 0.1, False)


def test_starting_again_forgets_the_old_state(tmp_path, capsys):
    state = tmp_path / "newbob.json"
    start(state, lr=0.2)
    step(capsys, state, 1.0)
    start(state, lr=0.3)
    assert step(capsys, state, 5.0) == ("accepted", 0.3, False)


def test_a_normal_run_prints_nothing_but_its_answer(tmp_path):
    """Finding 20 of issue 25: `-m` on a module the package had imported
    already printed a RuntimeWarning into every ITERATION line."""
    state = str(tmp_path / "newbob.json")
    env = dict(os.environ, PYTHONPATH=ROOT)
    for argv, answer in (([state, "--lr", "0.1"], ""), ([state, "1.5"], "accepted 0.1 0\n")):
        r = subprocess.run([sys.executable, "-m", "psgd.train.newbob"] + argv, env=env,
                           capture_output=True, text=True, timeout=60)
        assert (r.returncode, r.stdout, r.stderr) == (0, answer, "")


@pytest.mark.parametrize("text, culprit", [
    ("{not json", "not JSON"),
    ("[1, 2]", "not a JSON object"),
    ('{"lr": 0.1}', "no 'halving'"),
    ('{"lr": "fast", "halving": false, "done": false, "best_loss": 1.0, "options": {}}',
     "'lr' is 'fast'"),
    ('{"lr": 0.1, "halving": 0, "done": false, "best_loss": 1.0, "options": {}}',
     "'halving' is 0"),
    ('{"lr": 0.1, "halving": false, "done": false, "best_loss": 1.0, '
     '"options": {"factor": 2}}', "options"),
    ('{"lr": 0.1, "halving": false, "done": false, "best_loss": 1.0, '
     '"options": {"speed": 2}}', "options"),
    ('{"lr": 0.1, "halving": false, "done": false, "best_loss": 1.0, '
     '"options": {"start": "x"}}', "option 'start' is 'x'"),
])
def test_a_bad_state_file_is_one_line_naming_it(tmp_path, capsys, text, culprit):
    """Finding 20 of issue 25: a bad state file gave a traceback."""
    state = tmp_path / "newbob.json"
    state.write_text(text)
    err = refused(capsys, [state, "1.0"])
    assert str(state) in err and culprit in err, err
    assert state.read_text() == text        # left as it was


def test_a_step_without_a_started_state_says_how_to_start(tmp_path, capsys):
    err = refused(capsys, [tmp_path / "newbob.json", "1.0"])
    assert "no such file" in err and "--lr" in err


@pytest.mark.parametrize("argv, culprit", [
    (["--lr", "abc"], "--lr"),
    (["--lr", "-1"], "--lr"),
    (["--lr", "nan"], "--lr"),
    (["--halving-factor", "2"], "--halving-factor"),
    (["--start-halving-impr", "-0.1"], "--start-halving-impr"),
    (["--end-halving-impr", "x"], "--end-halving-impr"),
])
def test_bad_rates_are_refused_before_any_state_is_written(tmp_path, capsys, argv, culprit):
    state = tmp_path / "newbob.json"
    err = refused(capsys, [state] + argv)
    assert culprit in err and not state.exists(), err


def test_rates_on_a_step_are_refused(tmp_path, capsys):
    state = tmp_path / "newbob.json"
    start(state)
    assert culprit_of(refused(capsys, [state, "1.0", "--lr", "0.5"])) == "--lr"


def culprit_of(err):
    return err.split(": error: ")[1].split()[0]


def test_the_first_loss_must_be_finite(tmp_path, capsys):
    state = tmp_path / "newbob.json"
    start(state)
    assert "LOSS nan" in refused(capsys, [state, "nan"])
    assert json.loads(state.read_text())["best_loss"] is None
