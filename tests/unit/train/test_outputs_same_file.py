"""Two outputs of one run may not name one file: the later writer would
overwrite the other's output (a trace over the metrics, say)."""
from types import SimpleNamespace

from psgd.train.outputs import check_outputs


def args(tmp_path, **paths):
    base = dict(out=None, metrics=None, plot=None, timeline=None, checkpoint_dir=None)
    base.update({k: str(tmp_path / v) for k, v in paths.items()})
    return SimpleNamespace(**base)


def test_the_trace_and_the_metrics_in_one_file_are_refused(tmp_path):
    problem = check_outputs(args(tmp_path, metrics="t.json", timeline="t.json"))
    assert problem == "--timeline %s and --metrics name the same file: each would " \
                      "overwrite the other" % (tmp_path / "t.json")


def test_distinct_files_pass(tmp_path):
    assert check_outputs(args(tmp_path, metrics="m.jsonl", timeline="t.json",
                              out="model.npz")) is None
