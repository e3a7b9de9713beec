"""`python -m psgd.kaldi convert IN OUT [--binary false]` and `info FILE`.

convert: between a psgd .npz and a Kaldi nnet1 model, either direction
(the kind of each side is told by OUT's name: NAME.nnet is nnet1, anything
else .npz; IN's by its content). Converting to NAME.nnet also writes the
.npz's feature transform and class counts beside it as
final.feature_transform and ali_train_pdf.counts (steps/nnet/train.sh's
layout); converting to .npz stores --feature-transform / --class-frame-counts
in the file when given. info: the components and dimensions, like nnet-info.
This entry point loads .npz files through psgd.train (like the worker CLI).
"""
import sys

import numpy as np

from psgd.errors import UsageError

from psgd.command_line import OneLineParser, boolean, run
from psgd.kaldi_io import FeatureTransform, info, read_counts

PROG = "psgd.kaldi"


def _parser():
    p = OneLineParser(prog=PROG, description="Kaldi nnet1 models <-> psgd")
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("convert", help="IN OUT: .npz <-> .nnet")
    c.add_argument("input")
    c.add_argument("output")
    c.add_argument("--binary", type=boolean, default=True, metavar="true|false")
    c.add_argument("--feature-transform", default=None,
                   help="to .npz: store this Kaldi feature transform in it")
    c.add_argument("--class-frame-counts", default=None,
                   help="to .npz: store these class frame counts in it")
    i = sub.add_parser("info", help="FILE: components and dimensions")
    i.add_argument("file")
    return p


class _Extras:
    """What save_model reads off the trainer's data: transform and counts."""

    def __init__(self, transform, counts):
        self.feature_transform, self.class_counts = transform, counts


def convert(args):
    from psgd.train import output_plan
    from psgd.train.model_files import (COUNTS_KEY, TRANSFORM_KEY, check_extras, read_model,
                                        save_model)
    net, model, extras = read_model(args.input)
    transform = (FeatureTransform.read(args.feature_transform) if args.feature_transform
                 else extras.get(TRANSFORM_KEY))
    counts = (read_counts(args.class_frame_counts).astype(np.int64)
              if args.class_frame_counts else extras.get(COUNTS_KEY))
    check_extras(model, args.input, transform, counts,
                 args.class_frame_counts or "%s (its class counts)" % args.input)
    data = _Extras(transform, counts)
    problem = output_plan.problem(output_plan.model_file(args.output, data, ""))
    if problem:
        raise UsageError(problem)
    save_model(args.output, net.state_dict(), {"model": model}, data, binary=args.binary)


def show_info(args):
    from psgd.train.model_files import is_npz, read_model
    from psgd.kaldi_io import layers_of, read_nnet
    if is_npz(args.file):
        layers = layers_of(read_model(args.file)[0], name=args.file)
    else:
        layers = read_nnet(args.file)
    for line in info(layers):
        print(line)


def main(argv=None):
    args = _parser().parse_args(argv)
    return run("%s %s" % (PROG, args.command), convert if args.command == "convert"
               else show_info, args)


if __name__ == "__main__":
    sys.exit(main())
