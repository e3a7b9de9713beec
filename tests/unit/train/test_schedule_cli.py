"""`python -m psgd.train.schedule`: the newbob step bin/train_scheduler.sh
calls, so the shell scheduler has no newbob of its own."""
from psgd.train.schedule import Schedule, main


def step(capsys, state, loss, **options):
    argv = [str(state), repr(loss)] + ["--%s=%s" % kv for kv in options.items()]
    main(argv)
    verdict, lr, done = capsys.readouterr().out.split()
    return verdict, float(lr), done == "1"


def test_the_cli_steps_exactly_like_the_trainers_schedule(tmp_path, capsys):
    state = tmp_path / "newbob.json"
    losses = [2.0, 1.5, 1.6, 1.495, 1.494, 1.4939]
    options = {"lr": 0.1, "start": 0.01, "end": 0.001, "factor": 0.5}
    reference = Schedule("newbob", 0.1, start=0.01, end=0.001, factor=0.5)
    for loss in losses:
        got = step(capsys, state, loss, **options)
        accepted = reference.end_epoch(loss)
        assert got == ("accepted" if accepted else "rejected", reference.lr, reference.done)
    assert reference.done          # the sequence reaches the end of halving


def test_a_worse_loss_is_rejected_and_halves_the_rate(tmp_path, capsys):
    state = tmp_path / "newbob.json"
    assert step(capsys, state, 1.0, lr=0.2) == ("accepted", 0.2, False)
    assert step(capsys, state, 1.1, lr=0.2) == ("rejected", 0.1, False)
