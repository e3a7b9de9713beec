"""--timeline under mpirun: the trace has a track per rank with what each
did, `python -m psgd.timeline` reads it, the log ends naming the straggler
(a rank slowed by 30% in compute is the one named), a job killed after a
checkpoint leaves the trace up to it, --resume goes on writing it, and a
path that cannot be written fails before any work on every rank."""
import json
import os
import re
import subprocess
import sys

import pytest

from launch_util import MPIRUN, ROOT, assert_clean_failure, mpirun, psgd_train

pytestmark = pytest.mark.skipif(not os.path.exists(MPIRUN), reason="no mpirun beside python")

QUICK = ["--model", "mlp", "--hidden", "32", "--num-samples", "1000"]


def events(path):
    with open(path) as f:
        return json.load(f)["traceEvents"]


def straggler_lines(result):
    return re.findall(r"straggler: .*", result.stdout + result.stderr)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("algo", ["bmuf", "easgd"])
def test_a_trace_with_a_track_per_rank_and_the_straggler_named(tmp_path, algo):
    path = tmp_path / "t.json"
    result = psgd_train(3, "--algo", algo, *QUICK, "--epochs", "2", "--timeline", str(path))
    assert result.returncode == 0, result.stderr
    assert len(straggler_lines(result)) == 1, result.stderr
    found = events(path)
    tracks = {e["tid"]: e["args"]["name"] for e in found if e["name"] == "thread_name"}
    assert sorted(tracks) == [0, 1, 2]
    kinds = {e["name"] for e in found if e["ph"] == "X"}
    assert {"compute", "sync", "waiting", "epoch end", "evaluate"} <= kinds, kinds
    assert all(0 <= e["args"]["for"] < 3 for e in found if e["name"] == "waiting")
    assert ({"serve", "idle"} <= kinds) == (algo == "easgd"), kinds
    assert ({"count", "exchange + update"} <= kinds) == (algo == "bmuf"), kinds
    # one clock: every rank's epoch ends overlap
    ends = [e for e in found if e["name"] in ("epoch end", "epoch end (server)")
            and e["args"]["epoch"] == 0]
    assert len(ends) == 3
    assert max(e["ts"] for e in ends) <= min(e["ts"] + e["dur"] for e in ends) + 1e4
    summary = subprocess.run([sys.executable, "-m", "psgd.timeline", str(path)],
                             capture_output=True, text=True, cwd=ROOT)
    assert summary.returncode == 0, summary.stderr
    assert "straggler: rank" in summary.stdout


@pytest.mark.one_mpi
@pytest.mark.timeout(180)
@pytest.mark.parametrize("algo", ["bmuf", "easgd"])
def test_a_rank_slowed_by_30_percent_in_compute_is_named(tmp_path, driver, algo):
    fault = {"what": "slow", "factor": 0.3, "rank": 2}
    # equal shares: by speed (easgd's default) the slow rank takes less of
    # each epoch and no longer holds the others (tests/launch/test_work_shares.py)
    shares = ["--work-shares", "equal"] if algo == "easgd" else []
    result = mpirun(3, [driver, json.dumps(fault), "--algo", algo, "--epochs", "5",
                        "--metrics", str(tmp_path / "m.jsonl")] + shares, timeout=150)
    assert result.returncode == 0, result.stderr
    line = straggler_lines(result)
    assert len(line) == 1 and line[0].startswith("straggler: rank 2;"), result.stderr
    with open(tmp_path / "m.jsonl") as f:
        rows = [json.loads(r) for r in f]
    assert all("straggler_rank" in r and "straggler_share" in r for r in rows), rows


@pytest.mark.timeout(120)
def test_a_job_killed_after_a_checkpoint_leaves_its_trace(tmp_path, driver):
    fault = {"what": "raise", "rank": 1, "epoch": 2, "step": 2}
    path = tmp_path / "t.json"
    result = mpirun(3, [driver, json.dumps(fault), "--algo", "bsp", *QUICK, "--quiet",
                        "--epochs", "4", "--checkpoint-dir", str(tmp_path / "ck"),
                        "--timeline", str(path)], timeout=100, env={"PSGD_TRACEBACK": ""})
    assert result.returncode != 0
    epochs = {e["args"]["epoch"] for e in events(path) if e["name"] == "epoch end"}
    assert epochs == {0, 1}


@pytest.mark.one_mpi
@pytest.mark.timeout(120)
def test_resume_goes_on_writing_the_trace(tmp_path):
    path, ck = tmp_path / "t.json", str(tmp_path / "ck")
    flags = ["--algo", "bsp", *QUICK, "--quiet", "--checkpoint-dir", ck, "--timeline", str(path)]
    assert psgd_train(2, *flags, "--epochs", "2").returncode == 0
    result = psgd_train(2, *flags, "--epochs", "3", "--resume")
    assert result.returncode == 0, result.stderr
    found = events(path)
    assert sorted({e["args"]["epoch"] for e in found if e["name"] == "epoch end"}) == [0, 1, 2]
    assert len([e for e in found if e["name"] == "thread_name"]) == 2


@pytest.mark.one_mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("name, needle", [("", "is a directory"),
                                         ("t.png", "unknown format 'png'")])
def test_a_trace_path_that_cannot_be_written_fails_first(tmp_path, name, needle):
    result = psgd_train(2, "--algo", "bsp", *QUICK, "--timeline", str(tmp_path / name))
    assert_clean_failure(result, "--timeline %s" % (tmp_path / name))
    assert needle in result.stderr
    assert "epoch 1" not in result.stderr + result.stdout


@pytest.mark.one_mpi
@pytest.mark.timeout(60)
def test_resume_refuses_a_trace_it_cannot_go_on_with(tmp_path):
    path, ck = tmp_path / "t.json", str(tmp_path / "ck")
    flags = ["--algo", "bsp", *QUICK, "--quiet", "--checkpoint-dir", ck, "--timeline", str(path)]
    assert psgd_train(2, *flags, "--epochs", "1").returncode == 0
    path.write_text("not json")
    result = psgd_train(2, *flags, "--epochs", "2", "--resume")
    assert_clean_failure(result, "--timeline %s: cannot go on with this trace" % path)
    assert path.read_text() == "not json"
