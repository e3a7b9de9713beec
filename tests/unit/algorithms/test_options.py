import pytest

from psgd.algorithms import REGISTRY
from psgd.errors import UsageError


def resolve(name, size=4, **options):
    return REGISTRY[name].resolve_options(options, size)


COMPRESSION = {"compression": "none", "compression_block": 512, "compression_start": 0}


def test_defaults_follow_the_contract():
    assert resolve("bmuf", size=4) == {"block_momentum": 0.75, "block_lr": 1.0,
                                       "nesterov": True, "reset_local_state": True,
                                       "compression_momentum": "global", **COMPRESSION}
    assert resolve("bmuf", size=1)["block_momentum"] == 0.0
    sod = resolve("sod")
    assert (sod["outer"], sod["outer_lr"], sod["outer_momentum"]) == ("nesterov", 0.7, 0.9)
    assert sod["compression_momentum"] == "global"
    assert resolve("bsp") == {"weighting": "samples", **COMPRESSION}
    assert resolve("syncgrad") == dict(COMPRESSION, compression_momentum="global")



def test_masgd_has_a_delay_period_only_under_the_delayed_update():
    assert resolve("masgd", size=5)["delay_period"] is None
    assert resolve("masgd", size=5, delayed=True)["delay_period"] == 4
    assert resolve("masgd", size=5, delayed=True, delay_period=2)["delay_period"] == 2

@pytest.mark.parametrize("name,options,match", [
    ("bmuf", {"block_momentum": 1.0}, "block_momentum"),
    ("bmuf", {"block_momentum": -0.1}, "block_momentum"),
    ("bmuf", {"block_lr": 0.0}, "block_lr"),
    ("bmuf", {"nesterov": "yes"}, "true or false"),
    ("bmuf", {"block_lr": float("nan")}, "finite"),
    ("sod", {"outer": "lbfgs"}, "sgd, momentum, nesterov, adam"),
    ("sod", {"outer_lr": -1}, "outer_lr"),
    ("bsp", {"weighting": "median"}, "samples, uniform"),
    ("bsp", {"alpha": 0.5}, "no option alpha"),
    ("bmuf", {"block_lr": "fast"}, "must be a number"),
    ("bmuf", {"compression": "2bit"}, "none, fp16, bf16, 1bit"),
    ("sod", {"compression_block": 0}, "compression_block"),
    ("syncgrad", {"compression_start": -1}, "compression_start"),
    ("sod", {"compression_momentum": "shared"}, "global, local"),
    ("bsp", {"compression_momentum": "local"}, "no option compression_momentum"),
    ("bsp", {"compression_block": 2.5}, "integer"),
    ("easgd", {"compression": "fp16"}, "exchanges a model"),
    ("masgd", {"compression": "4bit"}, "none, fp16, bf16, 1bit"),
])
def test_invalid_options_are_usage_errors(name, options, match):
    with pytest.raises(UsageError, match=match):
        resolve(name, **options)


@pytest.mark.parametrize("name", ["bsp", "bmuf", "sod", "syncgrad", "asgd", "masgd"])
@pytest.mark.parametrize("option,value", [("compression_block", 64), ("compression_start", 3)])
def test_a_compression_option_without_compression_is_refused(name, option, value):
    """Not ignored: without compression these would change nothing."""
    with pytest.raises(UsageError, match="%s: option %s=%d applies only with compression" % (
            name, option, value)):
        resolve(name, **{option: value})
    assert resolve(name, compression="fp16", **{option: value})[option] == value
    assert resolve(name, compression="none")["compression"] == "none"


@pytest.mark.parametrize("name,options,needle", [
    ("sod", {"beta1": 0.8}, "sod: option beta1=0.8 applies to outer=adam, and outer is nesterov"),
    ("sod", {"eps": 1e-6, "outer": "sgd"}, "option eps=1e-06 applies to outer=adam, and outer "
                                           "is sgd"),
    ("sod", {"outer_momentum": 0.5, "outer": "adam"},
     "option outer_momentum=0.5 applies to outer=momentum|nesterov, and outer is adam"),
    ("asgd", {"dc_lambda": 0.3}, "asgd: option dc_lambda=0.3 applies to "
                                 "staleness_compensation=dc, and it is none"),
    ("masgd", {"dc_lambda": 0.3, "staleness_compensation": "scale"}, "and it is scale"),
    ("masgd", {"scope": "global", "delayed": True},
     "masgd: option scope='global' applies without delayed=true"),
    ("masgd", {"delay_period": 3}, "masgd: option delay_period=3 is the delayed Nesterov "
                                   "update's; it does nothing without delayed=true"),
])
def test_an_option_of_another_choice_is_refused(name, options, needle):
    with pytest.raises(UsageError, match=needle.replace("|", r"\|")):
        resolve(name, **options)


def test_the_options_of_the_choice_made_are_taken():
    assert resolve("sod", outer="adam", beta1=0.8, eps=1e-6)["beta1"] == 0.8
    assert resolve("sod", outer="momentum", outer_momentum=0.5)["outer_momentum"] == 0.5
    assert resolve("asgd", staleness_compensation="dc", dc_lambda=0.3)["dc_lambda"] == 0.3
    assert resolve("masgd", scope="global")["scope"] == "global"
