"""tests/launch_util.py's PopenJob: a job whose launcher never started it
(Open MPI's PMIx listener, now and then) is started once more; any other
ending is the job's own."""
import subprocess
import sys
import time

from launch_util import LAUNCHER_DID_NOT_START, PopenJob

# A stand-in launcher: its first `fails` launches end the way Open MPI's
# does when its listener fails to start, later ones run (and say so).
LAUNCHER = """
import os, sys
count, fails, message = sys.argv[1], int(sys.argv[2]), sys.argv[3]
n = int(open(count).read()) if os.path.exists(count) else 0
open(count, "w").write(str(n + 1))
if n < fails:
    sys.stderr.write(message + "\\n")
    sys.exit(213)
print("launch", n + 1)
"""


def launch(tmp_path, fails, message=LAUNCHER_DID_NOT_START):
    count = tmp_path / "count"
    err = open(str(tmp_path / "err"), "w")
    out = open(str(tmp_path / "out"), "w")
    job = PopenJob([sys.executable, "-c", LAUNCHER, str(count), str(fails), message],
                   stdout=out, stderr=err, stdin=subprocess.DEVNULL)
    return job, count, out, err


def test_a_launch_the_launcher_never_started_is_made_once_more(tmp_path):
    job, count, out, err = launch(tmp_path, fails=1)
    assert job.wait(30) == 0
    assert job.returncode == 0 and job.poll() == 0
    assert count.read_text() == "2"
    out.close(), err.close()
    assert (tmp_path / "out").read_text() == "launch 2\n"


def test_polling_finds_it_too(tmp_path):
    job, count, out, err = launch(tmp_path, fails=1)
    end = time.time() + 30
    while job.poll() != 0 and time.time() < end:
        time.sleep(0.01)
    assert job.poll() == 0 and count.read_text() == "2"


def test_only_once_and_only_for_that_message(tmp_path):
    job, count, out, err = launch(tmp_path, fails=2)
    assert job.wait(30) == 213          # the second failure is the job's answer
    assert count.read_text() == "2"
    (tmp_path / "other").mkdir()
    other, count, out, err = launch(tmp_path / "other", fails=1, message="some other error")
    assert other.wait(30) == 213
    assert count.read_text() == "1"
