"""psgd.torch.create(..., timeline=PATH): the trace of a torch job, every
rank's track, written by rank 0 at close()."""
import json

import pytest

torch = pytest.importorskip("torch")
import psgd.torch  # noqa: E402
from psgd import trace  # noqa: E402
from torch_models import cnn  # noqa: E402

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(60)]


def test_a_torch_job_writes_its_trace_at_close(comm, tmp_path):
    path = comm.bcast(str(tmp_path / "t.json") if comm.rank == 0 else None)
    sync = psgd.torch.create("bmuf", cnn(seed=0), comm=comm, timeline=path)
    sync.synchronize(8)
    sync.stop(0)
    sync.close()
    assert trace.recorder is None
    if comm.rank == 0:
        with open(path) as f:
            events = json.load(f)["traceEvents"]
        assert {e["tid"] for e in events if e["name"] == "sync"} == set(range(comm.size))
