"""The anneal schedule (psgd/train/schedule.py), and a resumed run's
schedule (psgd/train/consistency.py)."""
import math

import pytest

from psgd.errors import UsageError
from psgd.train.options import make_config
from psgd.train.schedule import ANNEAL_FLOOR, Schedule


def test_anneal_holds_for_half_the_epochs_then_falls_along_a_half_cosine_to_three_tenths():
    s = Schedule("anneal", 0.004)
    fractions = [s.fraction(e, 30) for e in range(30)]
    assert fractions[:16] == [1.0] * 16
    assert fractions[16:] == sorted(fractions[16:], reverse=True) and fractions[16] < 1
    assert fractions[22] == pytest.approx(ANNEAL_FLOOR + (1 - ANNEAL_FLOOR) * 0.5 *
                                          (1 + math.cos(math.pi * 7 / 15)))
    assert fractions[-1] == pytest.approx(0.308, abs=0.005)
    assert s.end_epoch(1.0) and s.lr == 0.004      # the base rate itself never moves
    assert s.describe(30) == ", annealed to x0.3 over epochs 17-30"     # 1-based
    assert s.describe(3) == ", annealed to x0.3 over epochs 3-3"
    assert s.describe(2) == s.describe(1) == ""                # it never begins


def test_the_trainer_anneals_by_default():
    from psgd.train.config import resolve
    assert resolve(make_config(algo="bsp"), 4).schedule.lr_schedule == "anneal"
    assert resolve(make_config(algo="asgd", lr_schedule="constant"), 5).schedule.lr_schedule \
        == "constant"


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
    """A checkpoint written when the trainer's default was a constant rate
    resumes at a constant rate, though the default now anneals."""
    from psgd.train.consistency import reconcile_resume, resumed_schedule
    old = {"config": {"algo": "asgd", "lr_schedule": "constant"}}
    args = make_config(algo="asgd")
    reconcile_resume(args, {}, old, False)      # not refused
    assert resumed_schedule(args, old) == "constant"
    schedule = Schedule("anneal", 1.0)
    schedule.load(Schedule("constant", 1.0).state(), resumed_schedule(args, old))
    assert schedule.kind == "constant" and schedule.fraction(29, 30) == 1.0
    assert resumed_schedule(args, {"config": {"algo": "asgd", "lr_schedule": None}}) is None
    args = make_config(algo="asgd", lr_schedule="exponential")
    assert resumed_schedule(args, old) is None
    with pytest.raises(UsageError, match="--lr-schedule exponential differs"):
        reconcile_resume(args, {}, old, False)
