"""The trainer's configuration is resolved once: every flag lands in one
frozen section, the defaults by N are chosen for the job's size, --servers
is checked for it, and nothing written to the flags or the sections sticks."""
import dataclasses

import pytest

from psgd.errors import UsageError
from psgd.train import make_config
from psgd.train.algorithm_flags import ALGORITHM_FLAGS
from psgd.train.config import Config, resolve
from psgd.train.defaults import DEFAULT_LR, default_sync_period
from psgd.train.options import build_parser, validate

# Flags no section holds by name: they are resolved into one (the algorithm's
# options, the large-batch rule's factor).
RESOLVED_AWAY = set(ALGORITHM_FLAGS) | {"lr_scaling"}


def sections():
    return {f.name: f.type for f in dataclasses.fields(Config) if f.name != "flags"}


def test_every_flag_is_in_exactly_one_section():
    dests = {a.dest for a in build_parser()._actions if a.dest != "help"}
    held = {}
    for name, kind in sections().items():
        for field in dataclasses.fields(kind):
            assert field.name not in held, (field.name, name, held.get(field.name))
            held[field.name] = name
    assert dests - set(held) == RESOLVED_AWAY
    assert set(held) - dests == {"size", "num_workers", "lr_scale", "lr_rule", "options"}


def test_the_defaults_by_n_are_chosen_for_the_jobs_size():
    config = resolve(make_config(algo="easgd"), 9)       # rank 0 serves 8 workers
    assert (config.run.size, config.run.servers, config.run.num_workers) == (9, 1, 8)
    assert dict(config.algorithm.options) == {"alpha": 0.3, "staleness_compensation": "scale"}
    assert config.optimizer.lr == pytest.approx(DEFAULT_LR["adam"] * config.optimizer.lr_scale)
    assert config.optimizer.lr_scale > 1 and config.optimizer.warmup_epochs == 2
    assert config.algorithm.sync_period == default_sync_period(make_config(algo="easgd"), 8)
    given = resolve(make_config(algo="easgd", lr=0.01, sync_period=64, alpha=0.5), 9)
    assert given.optimizer.lr == pytest.approx(0.01 * given.optimizer.lr_scale)
    assert (given.algorithm.sync_period, dict(given.algorithm.options)) == (
        64, {"alpha": 0.5, "staleness_compensation": "scale"})
    hybrid = resolve(make_config(model_parallel=True, model="mlp"), 4)
    assert (hybrid.run.servers, hybrid.run.num_workers) == (0, 4)


@pytest.mark.parametrize("options,size,text", [
    (dict(algo="masgd", servers=3), 3, "--servers 3 leaves no worker: run with mpirun -np 4"),
    (dict(algo="asgd"), 1, "asgd needs a server and at least one worker"),
])
def test_servers_are_checked_for_the_jobs_size(options, size, text):
    args = make_config(**options)        # the flags alone are fine
    with pytest.raises(UsageError, match=text):
        resolve(args, size)


def test_nothing_written_to_the_config_sticks():
    args = make_config(algo="bmuf", epochs=3)
    before = dict(vars(args))
    config = resolve(args, 4)
    assert vars(args) == before                  # resolving changes no flag
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.run.epochs = 5
    with pytest.raises(TypeError):
        config.flags["epochs"] = 5
    with pytest.raises(TypeError):
        config.algorithm.options["block_momentum"] = 0.9
    flags = config.namespace()
    flags.epochs = 5                             # a copy
    assert config.flags["epochs"] == 3


def test_validation_returns_new_flags_and_leaves_the_parsed_ones_alone():
    parsed = build_parser().parse_args(["--out", "final.nnet"])
    checked = validate(parsed)
    assert parsed.binary is None and parsed.checkpoint_every is None
    assert checked.binary is True and checked.checkpoint_every == 1


def test_the_trainers_choices_for_n_are_logged_in_one_line():
    from mpi4py import MPI
    from psgd.train.data_parallel import DataParallel
    line = DataParallel(resolve(make_config(algo="bmuf"), 6), MPI.COMM_SELF).choices()
    assert line == ("bmuf for 6 workers: a sync every 128 samples, block_momentum 0.5, "
                    "reset_local_state False")
    easgd = DataParallel(resolve(make_config(algo="easgd", sync_period=64), 3), MPI.COMM_SELF)
    assert easgd.choices() == ("easgd for 2 workers: a sync every 64 samples, alpha 0.45, "
                               "staleness_compensation scale")
    syncgrad = DataParallel(resolve(make_config(algo="syncgrad"), 2), MPI.COMM_SELF)
    assert syncgrad.choices() == "syncgrad for 2 workers: a sync every minibatch"
