"""An algorithm option is declared once (its Option, beside the math) and
the command line derives the rest: the flag, its choices and help, the
option it reaches, the check that it applies to --algo, and its place
among the flags a resume follows (issue 27: before, FOLLOWED_ON_RESUME had
drifted and lacked staleness_compensation and dc_lambda)."""
import pytest

from psgd.algorithms import REGISTRY
from psgd.errors import UsageError
from psgd.train import make_config, parse_args
from psgd.train.algorithm_flags import ALGORITHM_FLAGS, FLAGS
from psgd.train.consistency import FOLLOWED_ON_RESUME
from psgd.train.options import algorithm_options, build_parser

DECLARED = [(algo, name, opt) for algo, cls in REGISTRY.items()
            for name, opt in cls.OPTIONS.items()]


def flag_of(name, opt):
    return "--" + (opt.flag or name).replace("_", "-")


def a_value(opt):
    if opt.kind is bool:
        return None
    if isinstance(opt.kind, tuple):
        return opt.kind[-1]
    return "3" if opt.kind is int else "0.25"


@pytest.mark.parametrize("algo, name, opt", [d for d in DECLARED if d[2].flag is not False],
                         ids=lambda v: v if isinstance(v, str) else "")
def test_every_declared_option_has_its_flag_and_reaches_the_algorithm(algo, name, opt):
    flag, value = flag_of(name, opt), a_value(opt)
    argv = ["--algo", algo] + ([flag] if value is None else [flag, value])
    given = algorithm_options(parse_args(argv))
    expected = True if value is None else (
        value if isinstance(opt.kind, tuple) else opt.kind(value))
    assert given[name] == expected
    assert opt.help, "%s's option %s has no help" % (algo, name)
    assert flag in build_parser().format_help()


@pytest.mark.parametrize("algo, name, opt", [d for d in DECLARED if d[2].kind is bool],
                         ids=lambda v: v if isinstance(v, str) else "")
def test_a_bool_option_has_both_flags(algo, name, opt):
    flag = flag_of(name, opt)
    assert algorithm_options(parse_args(["--algo", algo, "--no-" + flag[2:]]))[name] is False
    assert algorithm_options(parse_args(["--algo", algo, flag]))[name] is True


def test_a_flag_of_another_algorithm_is_refused():
    with pytest.raises(UsageError, match=r"^--block-momentum does not apply to --algo easgd"):
        make_config(algo="easgd", block_momentum=0.5)
    with pytest.raises(UsageError, match=r"^--outer-beta1 does not apply to --algo bmuf"):
        make_config(algo="bmuf", outer_beta1=0.5)


def test_choices_come_from_the_declaration():
    choices = {a.dest: a.choices for a in build_parser()._actions if a.choices}
    for dest, flag in FLAGS.items():
        if isinstance(flag.kind, tuple):
            assert list(choices[dest]) == list(flag.kind)


def test_every_algorithm_flag_is_followed_on_resume():
    assert set(ALGORITHM_FLAGS) <= set(FOLLOWED_ON_RESUME)
    assert {"staleness_compensation", "dc_lambda"} <= set(FOLLOWED_ON_RESUME)


def test_an_option_kept_to_the_api_has_no_flag():
    assert "poll_max_sleep" not in ALGORITHM_FLAGS
    assert "--poll-max-sleep" not in build_parser().format_help()
