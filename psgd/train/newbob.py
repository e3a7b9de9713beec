"""`python -m psgd.train.newbob`: newbob one step at a time for
bin/train_scheduler.sh, so the shell scheduler and the trainer share one
newbob (psgd/train/schedule.py), its state kept in a JSON file between calls.

    python -m psgd.train.newbob STATE [--lr LR --start-halving-impr S
                                       --end-halving-impr E --halving-factor F]
    python -m psgd.train.newbob STATE LOSS

The first form checks the rates and starts afresh (before any training, so a
bad value fails first); each step records a held-out loss (the first one is
the initial model's) and prints `accepted|rejected LR DONE(0|1)`.
A module of its own: `-m` on psgd/train/schedule.py, which the package
imports, would run it twice (and say so in a RuntimeWarning)."""
import json
import math
import sys

from ..atomic import atomic_write
from ..command_line import OneLineParser, run
from ..errors import UsageError
from .options import finite_float
from .schedule import Schedule

PROG = "python -m psgd.train.newbob"
RATES = {"lr": 0.002, "start_halving_impr": 0.01, "end_halving_impr": 0.001,
         "halving_factor": 0.5}
# the state file: key -> the types its value may have
STATE_TYPES = {"lr": (int, float), "halving": (bool,), "done": (bool,),
               "best_loss": (int, float, type(None)), "options": (dict,)}


def build_parser():
    p = OneLineParser(prog=PROG, description="One newbob step of bin/train_scheduler.sh.")
    p.add_argument("state", metavar="STATE")
    p.add_argument("loss", metavar="LOSS", nargs="?", type=float,
                   help="the held-out loss of the last model (absent: start afresh)")
    for name, default in RATES.items():
        p.add_argument("--" + name.replace("_", "-"), type=finite_float, default=None,
                       help="when starting (default %g)" % default)
    return p


def start(args):
    rates = {k: v if getattr(args, k) is None else getattr(args, k) for k, v in RATES.items()}
    if rates["lr"] <= 0:
        raise UsageError("--lr must be > 0, got %r" % rates["lr"])
    for name in ("start_halving_impr", "end_halving_impr"):
        if rates[name] < 0:
            raise UsageError("--%s must be >= 0, got %r" % (name.replace("_", "-"), rates[name]))
    if not 0 < rates["halving_factor"] < 1:
        raise UsageError("--halving-factor must be in (0, 1), got %r" % rates["halving_factor"])
    return Schedule("newbob", rates["lr"], start=rates["start_halving_impr"],
                    end=rates["end_halving_impr"], factor=rates["halving_factor"])


def read(path):
    """The Schedule saved in `path`; a file that is not one is a one-line error."""
    try:
        with open(path) as f:
            saved = json.load(f)
    except FileNotFoundError:
        raise UsageError("%s: no such file (start it first: %s %s --lr LR)"
                         % (path, PROG, path)) from None
    except OSError as exc:
        raise UsageError("%s: cannot read (%s)" % (path, exc.strerror or exc)) from None
    except ValueError as exc:
        raise UsageError("%s: not a newbob state file (not JSON: %s)" % (path, exc)) from None
    problem = _state_problem(saved)
    if problem:
        raise UsageError("%s: not a newbob state file (%s)" % (path, problem))
    try:
        schedule = Schedule("newbob", saved["lr"], **saved["options"])
    except (TypeError, UsageError) as exc:
        raise UsageError("%s: not a newbob state file (options: %s)" % (path, exc)) from None
    schedule.load(saved)
    return schedule


def _state_problem(saved):
    if not isinstance(saved, dict):
        return "not a JSON object"
    for key, types in STATE_TYPES.items():
        if key not in saved:
            return "no %r" % key
        if not isinstance(saved[key], types) or (bool not in types
                                                  and isinstance(saved[key], bool)):
            return "%r is %r" % (key, saved[key])
    if not math.isfinite(saved["lr"]) or saved["lr"] <= 0:
        return "'lr' is %r" % saved["lr"]
    for key, value in saved["options"].items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return "option %r is %r" % (key, value)
    return None


def write(path, schedule):
    state = dict(schedule.state(), options={"start": schedule.start, "end": schedule.end,
                                             "factor": schedule.factor})
    try:
        atomic_write(path, lambda f: json.dump(state, f), binary=False)
    except OSError as exc:
        raise UsageError("%s: cannot write (%s)" % (path, exc.strerror or exc)) from None


def step(args):
    given = [k for k in RATES if getattr(args, k) is not None]
    if given:
        raise UsageError("--%s applies when STATE is started (without LOSS), not to a step"
                         % given[0].replace("_", "-"))
    schedule = read(args.state)
    if schedule.best_loss is None and not math.isfinite(args.loss):
        raise UsageError("LOSS %r: the first held-out loss (the initial model's) must be "
                         "finite" % args.loss)
    accepted = schedule.end_epoch(args.loss)
    write(args.state, schedule)
    return "%s %r %d" % ("accepted" if accepted else "rejected", schedule.lr, schedule.done)


def _act(args):
    if args.loss is None:
        write(args.state, start(args))
    else:
        print(step(args))


def main(argv=None):
    return run(PROG, _act, build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
