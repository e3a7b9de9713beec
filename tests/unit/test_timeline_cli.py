"""python -m psgd.timeline: the table, the straggler line and the picture
from a trace as the trainer writes it; bad input is one line and exit 2."""
import json
import subprocess
import sys

import pytest

from psgd import timeline, trace
from psgd.train.timeline import chrome_events

ROOT = __file__.rsplit("/tests/", 1)[0]


def sync(start, end, number):
    return (trace.SYNC, start, end, {"sync": number, "collective": True})


@pytest.fixture
def trace_file(tmp_path):
    # rank 2, on host b, computes 2s where the others compute 1s: they wait for it
    spans = []
    for r, compute in enumerate([1.0, 1.0, 2.0]):
        rank_spans, t = [], 100.0
        for n in range(3):
            rank_spans.append((trace.COMPUTE, t, t + compute, None))
            t += compute
            rank_spans.append(sync(t, 100.0 + 2.1 * (n + 1), n))
            t = 100.0 + 2.1 * (n + 1)
        rank_spans.append((trace.ARRIVE, t, t + 0.1, {"epoch": 0}))
        spans.append(rank_spans)
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": chrome_events(spans, ["a", "a", "b"])}))
    return path


def test_the_table_and_the_straggler(trace_file, capsys):
    assert timeline.main([str(trace_file)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith("straggler: rank 2 on b; the others waited 6.00s for it")
    rank0 = next(line for line in out if line.startswith("0 "))
    assert "3.00s" in rank0 and "worker" in rank0      # 3 x 1s of compute


def test_the_picture(trace_file, tmp_path, capsys):
    png = tmp_path / "t.png"
    assert timeline.main([str(trace_file), "--png", str(png)]) == 0
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_without_matplotlib_the_picture_is_one_line(trace_file, tmp_path, capsys,
                                                    monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    png = tmp_path / "t.png"
    assert timeline.main([str(trace_file), "--png", str(png)]) == 2
    assert "needs matplotlib" in capsys.readouterr().err
    assert not png.exists()


@pytest.mark.parametrize("content, needle", [
    (None, "cannot read it"), ("{", "not a trace psgd --timeline wrote"),
    ('{"traceEvents": []}', "has no rank's events"),
    ('{"metrics": 1}', "not a trace psgd --timeline wrote")])
def test_a_bad_trace_is_one_line(tmp_path, content, needle):
    path = tmp_path / "t.json"
    if content is not None:
        path.write_text(content)
    result = subprocess.run([sys.executable, "-m", "psgd.timeline", str(path)],
                            capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 2
    assert result.stderr.startswith("psgd.timeline: %s: " % path) and needle in result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr


def test_a_bad_png_path_is_named_before_reading(trace_file, tmp_path, capsys):
    assert timeline.main([str(trace_file), "--png", str(tmp_path)]) == 2
    assert "--png %s is a directory" % tmp_path in capsys.readouterr().err
    assert timeline.main([str(trace_file), "--png", str(trace_file)]) == 2
    assert timeline.main([str(trace_file), "--png", str(tmp_path / "no" / "t.png")]) == 2
    assert "no folder" in capsys.readouterr().err


def test_the_picture_zooms_on_an_epoch_the_trace_has(trace_file, tmp_path, capsys):
    png = tmp_path / "t.png"
    assert timeline.main([str(trace_file), "--png", str(png), "--epoch", "1"]) == 0
    assert timeline.main([str(trace_file), "--png", str(png), "--epoch", "3"]) == 2
    assert "--epoch 3: the trace has epochs 1 to 1" in capsys.readouterr().err
    assert timeline.main([str(trace_file), "--epoch", "0"]) == 2


def test_a_bad_flag_is_one_line(trace_file, capsys):
    with pytest.raises(SystemExit) as exit:
        timeline.main([str(trace_file), "--epochs", "3"])
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m psgd.timeline: error: unrecognized arguments: --epochs 3")
    assert len(err.splitlines()) == 1, err
