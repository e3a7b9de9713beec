"""What each algorithm's state keys are when a checkpoint resumes on
another number of workers (GLOBAL_STATE / WORKER_STATE on the class):
every key of every role is declared, the global ones are those of the
whole job, and load_global_state after reset_to keeps exactly the global
keys it is given while a worker's own state stays as a fresh object's."""
import numpy as np
import pytest
from mpi4py import MPI

import psgd

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(60)]

SHAPES = [(3, 4), (5,)]
VARIANTS = {"bsp": {}, "syncgrad": {}, "bmuf": {"block_lr": 0.5}, "sod": {"outer": "adam"},
            "easgd": {}, "asgd": {"staleness_compensation": "dc"}, "masgd": {},
            "masgd-global": {"scope": "global"}}
# key -> global? (the keys every role of the algorithm holds that say most)
EXPECTED = {"bmuf": {"global_model": True, "block_momentum": True, "block_start": True},
            "sod": {"global_model": True, "velocity": True, "second_moment": True,
                    "steps": True},
            "asgd": {"center": True, "w_prev": False},
            "masgd": {"center": True, "velocity": False, "w_prev": False},
            "masgd-global": {"center": True, "velocity": True, "w_prev": False}}


def create(variant, comm, seed):
    name = variant.split("-")[0]
    params = [np.random.default_rng(seed).standard_normal(s) for s in SHAPES]
    grads = [np.zeros(s) for s in SHAPES] if name == "syncgrad" else None
    return psgd.create(name, params, comm=comm, grads=grads, **VARIANTS[variant])


def one_round(obj, comm):
    """A sync that leaves non-trivial state (D, outer moments, velocities)."""
    if obj.role == "server":
        obj.run()
        return
    obj.buffer.data[...] += 0.1 * (comm.rank + 1)
    if obj.name == "syncgrad":
        obj.grad_buffer.data[...] = comm.rank + 1.0
        obj.synchronize(comm.rank + 1)
        obj.stop(0, step=lambda: None)
    else:
        obj.synchronize(comm.rank + 1)
        obj.stop(0)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_state_key_is_declared_and_global_state_carries_over(comm, variant):
    used = create(variant, comm, comm.rank)
    try:
        one_round(used, comm)
        saved = {k: np.copy(v) for k, v in used.state_dict().items()}
        scopes = {k: used.is_global_state(k) for k in saved}     # a TypeError if undeclared
        for key, scope in EXPECTED.get(variant, {}).items():
            if key in scopes:
                assert scopes[key] is scope, key
        # rank 0 ends a round on the global model (w_g, the center), as a checkpoint does
        model = np.copy(used.buffer.data) if comm.rank == 0 else None
        model = comm.bcast(model)
        used.reset_to(model if comm.rank == 0 else None)
        used.load_global_state({k: v for k, v in saved.items() if scopes[k]})
        fresh = create(variant, comm, 0)
        fresh.reset_to(model if comm.rank == 0 else None)
        now, fresh_state = used.state_dict(), fresh.state_dict()
        for key, value in now.items():
            np.testing.assert_array_equal(value, saved[key] if scopes[key] else fresh_state[key],
                                          err_msg=key)
        np.testing.assert_array_equal(used.buffer.data, model)
        fresh.close()
    finally:
        used.close()


def test_an_undeclared_key_is_named(comm):
    with create("bsp", comm, 0) as obj:
        with pytest.raises(TypeError, match="'mystery' is declared neither"):
            obj.is_global_state("mystery")
        assert obj.is_global_state("residual_grads") is False   # compression residuals
    MPI.COMM_WORLD.Barrier()
