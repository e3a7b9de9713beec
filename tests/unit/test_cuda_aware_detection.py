"""How CUDA-aware MPI is detected on libraries this host does not have:
the hint variables of each family, Cray's library names, the MPICH
versions whose query must not be called, and CUDA before MPI (Open MPI 5)."""
import pytest

from psgd import _cuda_first, cuda_aware


class FakeLib:
    def __init__(self, answer):
        self.calls = 0
        self.answer = answer
        lib = self

        class Query:
            restype = None

            def __call__(self):
                lib.calls += 1
                return lib.answer
        self.MPIX_Query_cuda_support = Query()
        self.MPI_Init = object()


@pytest.fixture
def library(monkeypatch):
    """Pretend this process runs a given MPI library."""
    def use(version_text, lib):
        monkeypatch.setattr(cuda_aware.MPI, "Get_library_version", lambda: version_text)
        monkeypatch.setattr(cuda_aware, "libmpi", lambda: ("/opt/mpi/lib/libmpi.so.12", lib))
        for _, name, _ in cuda_aware._HINTS:
            monkeypatch.delenv(name, raising=False)
    return use


def test_mpich_before_4_is_not_queried_and_its_own_variable_is_the_hint(library, monkeypatch):
    lib = FakeLib(1)
    library("MPICH Version:      3.4.3\nMPICH Release date: ...", lib)
    assert cuda_aware.detect()[0] is False and lib.calls == 0
    monkeypatch.setenv("MPICH_GPU_SUPPORT_ENABLED", "1")          # Cray's, not MPICH's
    assert cuda_aware.detect()[0] is False
    monkeypatch.setenv("MPIR_CVAR_ENABLE_GPU", "1")
    aware, reason = cuda_aware.detect()
    assert aware and "MPIR_CVAR_ENABLE_GPU=1" in reason and lib.calls == 0
    library("MPICH Version:      4.1.2\n", lib)
    assert cuda_aware.detect()[0] is True and lib.calls == 1       # 4.x: the query decides


def test_cray_mpich_is_decided_by_its_variable(library, monkeypatch):
    lib = FakeLib(1)
    library("MPI VERSION    : CRAY MPICH version 8.1.27.26 (ANL base 3.4a2)", lib)
    assert cuda_aware.detect()[0] is False and lib.calls == 0
    monkeypatch.setenv("MPICH_GPU_SUPPORT_ENABLED", "1")
    assert cuda_aware.detect()[0] is True and lib.calls == 0


def test_crays_library_names_are_found(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text("".join("7f00-7f01 r-xp 0 00:00 1 %s\n" % p for p in (
        "/opt/cray/pe/lib64/libmpi_gnu_123.so.12", "/opt/cray/pe/lib64/libmpi_cxx.so.40",
        "/usr/lib/libmpich.so.12", "/usr/lib/libm.so.6")))
    assert cuda_aware._mapped_libmpi(str(maps)) == ["/opt/cray/pe/lib64/libmpi_gnu_123.so.12"]
    maps.write_text("7f00 r-xp 0 0 1 /opt/cray/pe/lib64/libmpi_cray.so.12\n"
                    "7f00 r-xp 0 0 1 /usr/lib/libmpi.so.40\n")
    assert cuda_aware._mapped_libmpi(str(maps)) == ["/usr/lib/libmpi.so.40",
                                                    "/opt/cray/pe/lib64/libmpi_cray.so.12"]


def test_open_mpi_says_when_cuda_came_after_mpi(library, monkeypatch):
    library("Open MPI v5.0.3, package: Open MPI ...", FakeLib(0))
    monkeypatch.setitem(_cuda_first._state, "device", None)
    aware, reason = cuda_aware.detect()
    assert not aware and "MPI started before CUDA was initialized" in reason
    monkeypatch.setitem(_cuda_first._state, "device", 0)
    assert "before CUDA" not in cuda_aware.detect()[1]


def test_cuda_is_initialized_before_mpi_on_the_ranks_own_gpu(monkeypatch):
    import simcupy
    previous = simcupy.install(device_count=2)
    monkeypatch.setitem(_cuda_first._state, "device", None)
    try:
        env = {_cuda_first.LOCAL_RANK: "3"}
        assert _cuda_first.initialize({}, [], simcupy) is None          # not Open MPI's mpirun
        assert _cuda_first.initialize(dict(env, PSGD_BACKEND="numpy"), [], simcupy) is None
        assert _cuda_first.initialize(env, ["--backend", "numpy"], simcupy) is None
        assert not _cuda_first.initialized()
        assert _cuda_first.initialize(env, ["--gpu-ids=0"], simcupy) == 0
        assert _cuda_first.initialize(env, [], simcupy) == 1            # local rank 3 % 2
        assert simcupy.cuda.Device().id == 1 and _cuda_first.initialized()
    finally:
        simcupy.uninstall(previous)
