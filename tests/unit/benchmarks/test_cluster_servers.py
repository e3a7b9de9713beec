"""benchmarks/cluster_servers.py: each shape's rounds are read as the run
with the median steady share, beside every run's share."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "benchmarks"))
import cluster_servers  # noqa: E402

GBIT = 1e9 / 8      # bytes per second on a 1gbit link, one way


def a_run(servers, workers, steady, algo="asgd", tcp=0):
    """A child's result whose steady share is `steady`."""
    through = steady * 2 * min(servers, workers) * GBIT
    row = {"servers_bytes_per_s": through, "steady_bytes_per_s": through}
    return {"algo": algo, "rate": "1gbit", "tcp_buffer": tcp, "servers": servers,
            "workers": workers, "rows": [row], "marker": (servers, workers, steady)}


def test_the_median_run_of_each_shape_in_the_order_shapes_first_ran():
    runs = [a_run(2, 2, 0.86), a_run(3, 3, 0.74), a_run(2, 2, 0.83), a_run(3, 3, 0.81),
            a_run(2, 2, 0.90), a_run(3, 3, 0.77)]
    picked = cluster_servers.median_runs(runs)
    assert [r["marker"] for r, _ in picked] == [(2, 2, 0.86), (3, 3, 0.77)]
    assert [[round(x, 2) for x in shares] for _, shares in picked] == [[0.83, 0.86, 0.90],
                                                                        [0.74, 0.77, 0.81]]


def test_shapes_differ_by_algo_and_sockets_and_one_run_is_its_own_median():
    runs = [a_run(2, 2, 0.86), a_run(2, 2, 0.80, tcp=2 ** 18), a_run(2, 2, 0.89, algo="easgd"),
            a_run(2, 2, 0.84)]
    picked = cluster_servers.median_runs(runs)
    # of two runs the lower is the median read: never the luckier one
    assert [r["marker"] for r, _ in picked] == [(2, 2, 0.84), (2, 2, 0.80), (2, 2, 0.89)]


def test_the_report_shows_every_runs_share():
    runs = [a_run(2, 2, 0.86), a_run(2, 2, 0.83), a_run(2, 2, 0.90)]
    for r in runs:
        r["rows"][0].update(size=10 ** 7, wall_s=8.0, syncs=40, server_cpu_share=0.5)
        r["load"] = [1.0, 2.0]
    section = cluster_servers.report(runs)
    assert "| 0.83, 0.86, 0.90 |" in section.markdown
    assert "the median of 3 runs, 0.83, 0.86, 0.90" in section.headlines[0]
