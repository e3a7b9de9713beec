"""The trainer's flags from Python and the command line: a flag that acts
only beside another is refused alone (issue 25, finding 22), and takes its
default where it acts."""
import pytest

from psgd.errors import UsageError
from psgd.train import make_config, parse_args


@pytest.mark.parametrize("options, needle", [
    ({"binary": False}, "--binary applies to a Kaldi nnet1 --out NAME.nnet; there is no --out"),
    ({"binary": True, "out": "m.npz"}, "--binary applies to a Kaldi nnet1 --out NAME.nnet; "
                                       "--out m.npz writes a psgd .npz"),
    ({"checkpoint_every": 3}, "--checkpoint-every applies to --checkpoint-dir"),
    ({"bptt": 8}, "--bptt applies to --model lstm; the model is cnn"),
    ({"lr_decay": 0.5}, "--lr-decay applies to --lr-schedule exponential; the schedule is anneal"),
    ({"lr_decay": 0.5, "lr_schedule": "newbob"}, "--lr-decay applies to --lr-schedule "
                                                  "exponential; the schedule is newbob"),
    ({"newbob_start": 0.1}, "--newbob-start applies to --lr-schedule newbob"),
    ({"newbob_end": 0.1, "lr_schedule": "constant"}, "--newbob-end applies to --lr-schedule "
                                                     "newbob; the schedule is constant"),
    ({"newbob_factor": 0.1}, "--newbob-factor applies to --lr-schedule newbob"),
    ({"cmvn": False}, "--no-cmvn applies to Kaldi data"),
    ({"warmup_epochs": 3, "lr_scaling": False}, "--warmup-epochs ramps up to the scaled rate; "
                                                "--no-lr-scaling keeps the one-worker rate"),
    ({"algo": "syncgrad", "sync_period": 64}, "--sync-period changes nothing with --algo "
                                              "syncgrad, which syncs every minibatch"),
    ({"model_parallel": True, "sync_period": 64}, "--sync-period changes nothing with "
                                                  "--model-parallel"),
    ({"model_parallel": True, "algo": "bmuf", "block_momentum": 0.5},
     "--block-momentum changes nothing with --model-parallel"),
    ({"feats": "scp:f.scp", "targets": "ali.ark", "feature_transform": "t.nnet", "splice": 2},
     "--splice changes nothing with --feature-transform"),
    ({"feats": "scp:f.scp", "targets": "ali.ark", "feature_transform": "t.nnet", "cmvn": False},
     "--no-cmvn changes nothing with --feature-transform"),
])
def test_a_flag_alone_is_refused(options, needle):
    with pytest.raises(UsageError, match="^" + needle.replace(".", r"\.")):
        make_config(**options)


def test_the_flags_beside_what_they_act_on():
    assert make_config(binary=False, out="final.nnet").binary is False
    assert make_config(checkpoint_every=3, checkpoint_dir="ck").checkpoint_every == 3


def test_the_schedule_and_model_flags_where_they_act():
    assert make_config(bptt=8, model="lstm").bptt == 8
    assert make_config(lr_decay=0.5, lr_schedule="exponential").lr_decay == 0.5
    args = make_config(newbob_start=0.1, newbob_end=0.02, newbob_factor=0.7,
                       lr_schedule="newbob")
    assert (args.newbob_start, args.newbob_end, args.newbob_factor) == (0.1, 0.02, 0.7)
    assert make_config(feats="scp:f.scp", targets="ali.ark", cmvn=False).cmvn is False


def test_their_defaults():
    args = parse_args([])
    assert (args.binary, args.checkpoint_every) == (True, 1)
    assert (args.bptt, args.lr_decay, args.newbob_start, args.newbob_end,
            args.newbob_factor) == (20, 0.9, 0.01, 0.001, 0.5)
    assert make_config(out="final.nnet", checkpoint_dir="ck").checkpoint_every == 1
