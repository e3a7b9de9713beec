"""One BLAS thread per rank's share of the cores, set before NumPy loads.

Under mpirun every rank's OpenBLAS starts one spinning thread per core, so
N ranks on C cores run N*C busy threads: measured here, 5 ranks on 2 cores
trained an epoch 40x slower than with one thread each. When the job was
started by an MPI launcher and the user set no thread count, each rank gets
max(1, cores // ranks on this node)."""
import os

_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
_LOCAL_SIZE_VARS = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "MV2_COMM_WORLD_LOCAL_SIZE",
                    "SLURM_NTASKS_PER_NODE", "PMI_SIZE")


def limit_blas_threads(environ=os.environ):
    if any(var in environ for var in _THREAD_VARS):
        return None
    for var in _LOCAL_SIZE_VARS:
        try:
            local = int(environ[var].split("(")[0])
            break
        except (KeyError, ValueError):
            continue
    else:
        return None
    threads = max(1, (os.cpu_count() or 1) // max(local, 1))
    for var in _THREAD_VARS:
        environ[var] = str(threads)
    return threads
