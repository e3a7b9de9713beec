"""The anneal schedule (psgd/train/schedule.py), and a resumed run's
schedule (psgd/train/consistency.py)."""
import math

import pytest

from psgd.errors import UsageError
from psgd.train.options import make_config
from psgd.train.schedule import ANNEAL_FLOOR, Schedule


def test_anneal_holds_for_a_third_of_the_epochs_then_falls_along_a_half_cosine_to_a_tenth():
    s = Schedule("anneal", 0.004)
    fractions = [s.fraction(e, 30) for e in range(30)]
    assert fractions[:11] == [1.0] * 11
    assert fractions[11:] == sorted(fractions[11:], reverse=True) and fractions[11] < 1
    assert fractions[22] == pytest.approx(ANNEAL_FLOOR + (1 - ANNEAL_FLOOR) * 0.5 *
                                          (1 + math.cos(math.pi * 12 / 20)))
    assert fractions[-1] == pytest.approx(0.105, abs=0.005)
    assert s.end_epoch(1.0) and s.lr == 0.004      # the base rate itself never moves
    assert s.describe(30) == ", annealed to x0.1 over epochs 11-30"


def test_the_anneal_is_a_function_of_the_epoch_alone_so_a_resume_continues_it():
    fresh, resumed = Schedule("anneal", 1.0), Schedule("anneal", 1.0)
    resumed.load(fresh.state())
    assert [resumed.fraction(e, 10) for e in range(5, 10)] == \
        [fresh.fraction(e, 10) for e in range(5, 10)]


@pytest.mark.parametrize("kind", ["constant", "exponential", "newbob"])
def test_other_schedules_train_at_their_own_rate(kind):
    s = Schedule(kind, 0.01)
    assert [s.fraction(e, 4) for e in range(4)] == [1.0] * 4 and s.describe(4) == ""


def test_an_unknown_schedule_is_refused():
    with pytest.raises(UsageError, match="unknown lr schedule 'cosine'"):
        Schedule("cosine", 0.1)


def test_a_resume_without_the_flag_keeps_the_checkpoints_named_schedule():
    """A checkpoint written when the trainer annealed asgd at 4 workers by
    default resumes annealed, though the default is now constant."""
    from psgd.train.consistency import reconcile_resume, resumed_schedule
    old = {"config": {"algo": "asgd", "lr_schedule": "anneal"}}
    args = make_config(algo="asgd")
    reconcile_resume(args, {}, old, False)      # not refused
    assert resumed_schedule(args, old) == "anneal"
    schedule = Schedule("constant", 1.0)
    schedule.load(Schedule("anneal", 1.0).state(), resumed_schedule(args, old))
    assert schedule.kind == "anneal" and schedule.fraction(29, 30) < 0.2
    assert resumed_schedule(args, {"config": {"algo": "asgd", "lr_schedule": None}}) is None
    args = make_config(algo="asgd", lr_schedule="exponential")
    assert resumed_schedule(args, old) is None
    with pytest.raises(UsageError, match="--lr-schedule exponential differs"):
        reconcile_resume(args, {}, old, False)
