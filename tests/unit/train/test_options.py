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
])
def test_a_flag_alone_is_refused(options, needle):
    with pytest.raises(UsageError, match="^" + needle.replace(".", r"\.")):
        make_config(**options)


def test_the_flags_beside_what_they_act_on():
    assert make_config(binary=False, out="final.nnet").binary is False
    assert make_config(checkpoint_every=3, checkpoint_dir="ck").checkpoint_every == 3


def test_their_defaults():
    args = parse_args([])
    assert (args.binary, args.checkpoint_every) == (True, 1)
    assert make_config(out="final.nnet", checkpoint_dir="ck").checkpoint_every == 1
