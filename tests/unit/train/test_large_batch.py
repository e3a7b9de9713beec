"""The large-batch rule and its warm-up (psgd/train/large_batch.py)."""
import math

import pytest

from psgd.train import large_batch
from psgd.train.defaults import lr_rule_name, lr_scale
from psgd.train.options import make_config


def test_square_root_rule_for_adaptive_optimizers_linear_for_sgd():
    assert large_batch.scale_factor("adam", 8) == pytest.approx(math.sqrt(8))
    assert large_batch.scale_factor("momentum", 8) == 8.0
    assert large_batch.scale_factor("adam", 1) == 1.0


def test_the_linear_start_is_linear_to_3x_then_square_root():
    ks = [large_batch.scale_factor("adam", n, linear_start=True) for n in (1, 2, 3, 4, 8, 9, 16)]
    assert ks == pytest.approx([1.0, 2.0, 3.0, 3.0, 3.0, 3.0, 4.0])
    assert large_batch.scale_factor("sgd", 4, linear_start=True) == 4.0


def test_warmup_ramps_from_above_the_one_worker_rate_to_the_scaled_rate():
    k, W = 4.0, 3
    rates = [k * large_batch.warmup_factor(e, k, W) for e in range(6)]
    assert rates == pytest.approx([1 + 3 * 0.25, 1 + 3 * 0.5, 1 + 3 * 0.75, 4, 4, 4])
    assert large_batch.warmup_factor(0, k, 0) == 1.0


@pytest.mark.parametrize("algo,k", [("bsp", 3.0), ("sod", 2.0), ("easgd", 4.0),
                                    ("syncgrad", 3.0), ("asgd", 4.0)])
def test_which_algorithms_scale_and_the_flag_that_turns_it_off(algo, k):
    assert lr_scale(make_config(algo=algo), 4) == k
    assert lr_scale(make_config(algo=algo, lr_scaling=False), 4) == 1.0
    assert lr_scale(make_config(algo=algo), 1) == 1.0


def test_easgd_takes_the_linear_rule_with_every_optimizer():
    from psgd.train.defaults import lr_rule_name, warmup_epochs
    for optimizer in ("adam", "rmsprop", "momentum"):
        easgd = make_config(algo="easgd", optimizer=optimizer)
        assert [lr_scale(easgd, n) for n in (1, 2, 3, 4, 6, 8)] == [1, 2, 3, 4, 6, 8]
        assert lr_rule_name(easgd) == "linear"
        assert warmup_epochs(easgd) == 2
    # bsp keeps its linear start to 3x
    assert lr_scale(make_config(algo="bsp"), 8) == 3.0


def test_trainer_defaults_by_number_of_workers():
    from psgd.train.defaults import default_lr, warmup_epochs
    from psgd.train.options import algorithm_options
    scale = {"staleness_compensation": "scale"}
    assert algorithm_options(make_config(algo="easgd"), 8) == dict(scale, alpha=0.3)
    assert algorithm_options(make_config(algo="easgd", alpha=0.5), 8) == dict(scale, alpha=0.5)
    keep = {"reset_local_state": False}
    assert algorithm_options(make_config(algo="bmuf"), 4) == {"block_momentum": 0.5, **keep}
    assert algorithm_options(make_config(algo="bmuf"), 2) == {"block_momentum": 0.5, **keep}
    assert algorithm_options(make_config(algo="bmuf"), 1) == {"block_momentum": 0.0, **keep}
    assert algorithm_options(make_config(algo="bmuf"), 5) == {"block_momentum": 0.5, **keep}
    assert algorithm_options(make_config(algo="bmuf"), 8) == {"block_momentum": 0.5, **keep}
    assert [lr_scale(make_config(algo="bmuf"), n) for n in (3, 4, 5, 7, 8, 12)] == [
        1.0, 2.0, 2.0, 2.0, 2.0, 3.0]
    assert warmup_epochs(make_config(algo="bmuf")) == 0
    assert [algorithm_options(make_config(algo="sod"), n)["outer_lr"] for n in (1, 2, 4, 8)] == [
        pytest.approx(0.175), pytest.approx(0.35), 0.7, 0.7]
    assert algorithm_options(make_config(algo="sod", outer="nesterov"), 2) == {
        "outer": "nesterov", "outer_lr": pytest.approx(0.35)}
    assert algorithm_options(make_config(algo="sod", outer_lr=0.7), 2) == {"outer_lr": 0.7}
    assert algorithm_options(make_config(algo="sod", outer="adam"), 2) == {"outer": "adam"}
    asgd = make_config(algo="asgd")
    assert algorithm_options(asgd, 1) == {"staleness_compensation": "none"}
    assert algorithm_options(asgd, 4) == {"staleness_compensation": "dc", "alpha": 0.25}
    assert default_lr(asgd) == pytest.approx(0.002)
    masgd = make_config(algo="masgd")
    assert algorithm_options(masgd, 1) == {"staleness_compensation": "none"}
    assert algorithm_options(masgd, 3) == {"staleness_compensation": "dc"}


def test_bmuf_asgd_and_masgd_lighten_the_local_momentum_by_n():
    from psgd.train.config import resolve
    from psgd.train.defaults import local_momentum
    ns = (1, 2, 3, 4, 7, 8, 12)
    expected = {"bmuf": [None, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5],
                "asgd": [None, None, None, 0.7, 0.7, 0.7, 0.7],
                "masgd": [None, None, None, None, 0.7, 0.7, 0.7]}
    for algo, betas in expected.items():
        assert [local_momentum(make_config(algo=algo), n) for n in ns] == betas, algo
    bmuf = make_config(algo="bmuf")
    assert resolve(bmuf, 8).optimizer.options()["beta1"] == 0.5
    assert "beta1" not in resolve(bmuf, 1).optimizer.options()     # Adam's own 0.9
    assert local_momentum(make_config(algo="masgd", momentum=0.9), 8) == 0.9
    # measured with Adam: the others keep their own momentum
    for optimizer in ("momentum", "nesterov", "rmsprop", "sgd"):
        assert local_momentum(make_config(algo="asgd", optimizer=optimizer), 8) is None
    for algo in ("bsp", "sod", "syncgrad", "easgd"):
        assert local_momentum(make_config(algo=algo), 8) is None


def test_masgd_adds_the_mean_delta_with_momentum_one_half_from_4_workers():
    from psgd.train.defaults import default_sync_period, lr_rule_name, warmup_epochs
    masgd = make_config(algo="masgd")
    mean = {"staleness_compensation": "dc", "momentum": 0.5}
    assert algorithm_options_of(masgd, 4) == dict(mean, alpha=pytest.approx(0.5 / 4))
    assert algorithm_options_of(masgd, 8) == dict(mean, alpha=pytest.approx(0.5 / 8))
    # the user's momentum sets the gain: (1 - m) / N
    given = algorithm_options_of(make_config(algo="masgd", masgd_momentum=0.9), 4)
    assert given == dict(mean, momentum=0.9, alpha=pytest.approx(0.1 / 4))
    assert algorithm_options_of(make_config(algo="masgd", alpha=0.3), 4)["alpha"] == 0.3
    # the delayed update, asked for, keeps its own gain, the sum's rate and blocks
    delayed = make_config(algo="masgd", masgd_delayed_nesterov=True)
    assert algorithm_options_of(delayed, 8) == {"staleness_compensation": "dc", "delayed": True}
    assert lr_scale(delayed, 8) == 1.0
    assert [lr_scale(masgd, n) for n in (1, 3, 4, 5, 6, 8)] == pytest.approx(
        [1.0, 1.0, 4.0, 2 * math.sqrt(5), 2 * math.sqrt(6), 2 * math.sqrt(8)])
    assert lr_scale(make_config(algo="masgd", lr_scaling=False), 8) == 1.0
    assert lr_rule_name(masgd) == "masgd 2 sqrt(N)"
    assert warmup_epochs(masgd) == 0
    blocks = [default_sync_period(masgd, n) // masgd.minibatch_size for n in (1, 2, 3, 4, 8)]
    assert blocks == [32, 32, 32, 4, 4]
    assert default_sync_period(delayed, 2) == 4 * masgd.minibatch_size


def algorithm_options_of(args, n):
    from psgd.train.options import algorithm_options
    return algorithm_options(args, n)


def test_asgd_adds_the_mean_delta_delay_compensated_from_2_workers():
    from psgd.train.defaults import warmup_epochs
    asgd = make_config(algo="asgd")
    options = [algorithm_options_of(asgd, n) for n in (1, 2, 3, 4, 8)]
    assert [o.get("alpha") for o in options] == [None, 0.5, 1 / 3, 0.25, 0.125]
    assert [o["staleness_compensation"] for o in options] == ["none", "dc", "dc", "dc", "dc"]
    # x3 to 3 workers, then max(4, N / 2), for every optimizer: the SGD
    # family's linear N diverged
    assert [lr_scale(asgd, n) for n in (1, 2, 3, 4, 6, 8, 10)] == [1.0, 3.0, 3.0, 4.0, 4.0, 4.0,
                                                                 5.0]
    assert lr_scale(make_config(algo="asgd", optimizer="momentum"), 8) == 4.0
    assert lr_rule_name(asgd) == "asgd 3x to 3 workers, then max(4, N/2)"
    assert lr_scale(make_config(algo="asgd", lr_scaling=False), 8) == 1.0
    assert warmup_epochs(asgd) == 0
    assert algorithm_options_of(make_config(algo="asgd", alpha=1.0), 4)["alpha"] == 1.0
    given = make_config(algo="asgd", staleness_compensation="none")
    assert algorithm_options_of(given, 8)["staleness_compensation"] == "none"


def test_compressed_bmuf_sod_and_syncgrad_share_their_momentum_by_default():
    from psgd.train.options import algorithm_options
    local = {"compression_momentum": "local"}
    bmuf = algorithm_options(make_config(algo="bmuf", compression="1bit"), 4)
    assert bmuf["compression_momentum"] == "local" and bmuf["compression"] == "1bit"
    assert algorithm_options(make_config(algo="sod", compression="fp16"), 4)[
        "compression_momentum"] == "local"
    assert "compression_momentum" not in algorithm_options(make_config(algo="bmuf"), 4)
    assert "compression_momentum" not in algorithm_options(
        make_config(algo="sod", outer="adam", compression="1bit"), 4)     # not linear
    assert local.items() <= algorithm_options(
        make_config(algo="syncgrad", compression="1bit"), 4).items()
    assert "compression_momentum" not in algorithm_options(make_config(algo="syncgrad"), 4)
    for quantizer in ("fp16", "bf16"):       # syncgrad's own optimizer on the sum
        assert "compression_momentum" not in algorithm_options(
            make_config(algo="syncgrad", compression=quantizer), 4)
    assert algorithm_options(make_config(algo="bmuf", compression="1bit",
                                         compression_momentum="global"), 4)[
        "compression_momentum"] == "global"
    assert local.items() <= algorithm_options(
        make_config(algo="sod", outer="momentum", compression="bf16"), 2).items()


def test_1bit_lightens_the_momentum_bmuf_and_sod_send():
    keep = {"reset_local_state": False, "compression": "1bit", "compression_momentum": "local"}
    bmuf = [algorithm_options_of(make_config(algo="bmuf", compression="1bit"), n)
            for n in (1, 2, 4, 8)]
    assert bmuf == [dict(keep, block_momentum=eta) for eta in (0.0, 0.3, 0.3, 0.3)]
    for quantizer in ("fp16", "bf16"):
        assert algorithm_options_of(make_config(algo="bmuf", compression=quantizer), 4)[
            "block_momentum"] == 0.5
    assert algorithm_options_of(make_config(algo="bmuf", compression="1bit",
                                            block_momentum=0.7), 4)["block_momentum"] == 0.7
    sod = algorithm_options_of(make_config(algo="sod", compression="1bit"), 4)
    assert sod["outer_momentum"] == 0.8 and sod["outer_lr"] == 0.7
    assert algorithm_options_of(make_config(algo="sod", compression="1bit", outer="nesterov",
                                            outer_momentum=0.95), 2)["outer_momentum"] == 0.95
    assert "outer_momentum" not in algorithm_options_of(make_config(algo="sod"), 4)
    assert "outer_momentum" not in algorithm_options_of(
        make_config(algo="sod", compression="fp16"), 4)
    assert "outer_momentum" not in algorithm_options_of(      # its rate is the user's
        make_config(algo="sod", outer="momentum", compression="1bit"), 4)


@pytest.mark.parametrize("flags,N,k", [
    ({"compression": "1bit"}, 4, 3.0 * 2.0),                       # Adam: x sqrt(N)
    ({"compression": "1bit"}, 2, 2.0 * math.sqrt(2)),
    ({"compression": "1bit"}, 8, 3.0 * 2.0),                       # at most x2
    ({"compression": "fp16"}, 4, 3.0),                             # Adam on the sum
    ({"compression": "bf16"}, 8, 3.0),
    ({"compression": "1bit", "optimizer": "momentum"}, 4, 4.0),    # linear in g: the sum's
    ({"compression": "1bit", "compression_momentum": "global"}, 4, 3.0),
    ({}, 4, 3.0),
])
def test_syncgrad_summing_local_adaptive_steps_scales_the_rate_by_sqrt_n(flags, N, k):
    config = make_config(algo="syncgrad", **flags)
    assert lr_scale(config, N) == pytest.approx(k)
    named = "local steps x min(sqrt(N), 2)" in lr_rule_name(config)
    assert named == (lr_scale(config, N) != lr_scale(make_config(algo="syncgrad", **dict(
        flags, compression_momentum="global")), N))
