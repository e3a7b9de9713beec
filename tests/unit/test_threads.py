import os

from psgd._threads import limit_blas_threads


def test_mpi_launch_gets_cores_divided_by_local_ranks():
    env = {"MPI_LOCALNRANKS": "5"}
    assert limit_blas_threads(env) == max(1, (os.cpu_count() or 1) // 5)
    assert env["OMP_NUM_THREADS"] == env["OPENBLAS_NUM_THREADS"] == str(limit_blas_threads(
        {"MPI_LOCALNRANKS": "5"}))


def test_user_setting_and_plain_runs_are_left_alone():
    env = {"MPI_LOCALNRANKS": "4", "OMP_NUM_THREADS": "3"}
    assert limit_blas_threads(env) is None and env["OMP_NUM_THREADS"] == "3"
    assert limit_blas_threads({}) is None
    env = {"OMPI_COMM_WORLD_LOCAL_SIZE": "1"}
    assert limit_blas_threads(env) == (os.cpu_count() or 1)
