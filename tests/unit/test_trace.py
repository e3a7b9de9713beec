"""The recorder: off it records nothing; on it keeps one span per sync (and
the compute before it only with detail, for --timeline)."""
from psgd import trace


def test_without_detail_only_what_the_attribution_reads_is_kept():
    rec = trace.Recorder(detail=False)
    rec.resume(0.0)
    rec.part("count", 1.0, 1.1)
    rec.sync(1.0, 1.5, 0, collective=True)
    assert rec.take() == [(trace.SYNC, 1.0, 1.5, {"sync": 0, "collective": True})]
    assert rec.take() == []


def test_with_detail_the_compute_between_syncs_is_a_span():
    rec = trace.Recorder(detail=True)
    rec.resume(0.0)
    rec.sync(1.0, 1.5, 0, collective=False)
    rec.sync(2.0, 2.5, 1, collective=False)
    names = [(n, s, e) for n, s, e, _ in rec.take()]
    assert names == [(trace.COMPUTE, 0.0, 1.0), (trace.SYNC, 1.0, 1.5),
                     (trace.COMPUTE, 1.5, 2.0), (trace.SYNC, 2.0, 2.5)]
    rec.pause()
    rec.pause()            # not computing: nothing more to close
    assert [n for n, *_ in rec.take()] == [trace.COMPUTE]


def test_installing_none_turns_the_hooks_off():
    trace.install(trace.Recorder())
    assert trace.recorder is not None
    trace.install(None)
    assert trace.recorder is None
