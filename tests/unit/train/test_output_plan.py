"""The output-path plan: every file a run writes, side files included, and
the outputs that are one file."""
import os
from types import SimpleNamespace

import pytest

from psgd.train import output_plan


def args(**given):
    flags = dict(out=None, metrics=None, plot=None, timeline=None, checkpoint_dir=None)
    flags.update(given)
    return SimpleNamespace(**flags)


KALDI = SimpleNamespace(feature_transform=object(), class_counts=[1, 2])


def test_an_nnet1_out_plans_the_side_files_its_data_makes_it_write(tmp_path):
    out = str(tmp_path / "exp" / "final.nnet")
    paths = [o.path for o in output_plan.of_args(args(out=out), KALDI)]
    assert paths == [out, str(tmp_path / "exp" / "final.feature_transform"),
                     str(tmp_path / "exp" / "ali_train_pdf.counts")]
    assert [o.path for o in output_plan.of_args(args(out=out))] == [out]      # MNIST-1D
    npz = str(tmp_path / "m.npz")
    assert [o.path for o in output_plan.of_args(args(out=npz), KALDI)] == [npz]


def test_one_file_by_two_names_is_a_collision(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "real").mkdir()
    os.symlink("real", str(tmp_path / "link"))
    plan = output_plan.of_args(args(out=str(tmp_path / "real" / "m"), metrics="link/m"))
    assert output_plan.problem(plan) == "--metrics link/m is also --out %s: give each " \
        "output its own file" % (tmp_path / "real" / "m")


@pytest.mark.parametrize("metrics,refused", [
    ("ck/LATEST", True), ("ck/.lock", True), ("ck/epoch-0003/x", True), ("ck", True),
    ("ck/m.jsonl", False), ("ck/sub/LATEST", False), ("ck2", False)])
def test_files_where_checkpoints_go_are_refused(tmp_path, monkeypatch, metrics, refused):
    monkeypatch.chdir(tmp_path)
    plan = output_plan.of_args(args(metrics=metrics, checkpoint_dir="ck"))
    assert (output_plan.collision(plan) is not None) == refused


def test_other_ranks_check_only_the_checkpoint_folder(tmp_path):
    (tmp_path / "d").mkdir()
    plan = output_plan.of_args(args(out=str(tmp_path / "d"), checkpoint_dir=str(tmp_path)))
    assert "is a directory" in output_plan.problem(plan, main=True)
    assert output_plan.problem(plan, main=False) is None


def test_an_output_may_not_replace_an_input_but_the_transform_it_applies(tmp_path,
                                                                          monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "feats.scp").write_text("u1 a/f.ark:12\nu2 a/f.ark:99\nu3 b.ark\n"
                                        "u4 gunzip -c x.gz |\n")
    given = args(out="exp/final.nnet", metrics="ali.ark", feats="scp:feats.scp",
                 targets="ark:ali.ark", cv_feats="ark:gunzip -c cv.ark.gz |", cv_targets=None,
                 feature_transform="exp/final.feature_transform")
    inputs = output_plan.inputs_of(given)
    assert inputs == [("--feats scp:feats.scp", "feats.scp"), ("--feats scp:feats.scp", "a/f.ark"),
                      ("--feats scp:feats.scp", "b.ark"), ("--targets ark:ali.ark", "ali.ark"),
                      ("--feature-transform exp/final.feature_transform",
                       "exp/final.feature_transform")]
    plan = output_plan.of_args(given, KALDI)
    assert output_plan.replaced_input(plan, inputs) == \
        "--metrics ali.ark would replace the input --targets ark:ali.ark: give it another name"
    given.metrics = None
    assert output_plan.replaced_input(output_plan.of_args(given, KALDI), inputs) is None
    given.out = "exp/final.feature_transform"
    assert "would replace the input --feature-transform" in output_plan.replaced_input(
        output_plan.of_args(given, KALDI), inputs)
