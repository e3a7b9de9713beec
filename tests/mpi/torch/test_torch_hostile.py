"""psgd.torch misused (issue 25, findings 6 and 14): a rank whose module
lists its tensors in another order, and a state_dict that does not fit,
each named in one line on every rank."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import psgd  # noqa: E402
import psgd.torch  # noqa: E402
from torch_models import cnn, flat  # noqa: E402

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(60)]


class Pair(torch.nn.Module):
    """Two same-shaped parameters, registered in the given order."""

    def __init__(self, order):
        super().__init__()
        for name in order:
            self.register_parameter(name, torch.nn.Parameter(
                torch.full((3,), float(ord(name)))))


def test_6_parameters_registered_in_another_order_are_refused_on_every_rank(comm):
    """Pairing by position would give the last rank's `a` rank 0's `b`."""
    last = comm.size - 1
    model = Pair("ba" if comm.rank == last else "ab")
    with pytest.raises(psgd.UsageError, match=r"^the model \(its tensor names, in order\) "
                       r"differs between rank 0 and rank %d: parameters.0 'a' vs 'b'$" % last):
        psgd.torch.create("bsp", model, comm=comm)
    # refused before any rank's model was bound or changed
    assert model.a.tolist() == [97.0] * 3 and model.b.tolist() == [98.0] * 3
    with psgd.torch.create("bsp", Pair("ab"), comm=comm):     # the same order binds
        pass


@pytest.mark.parametrize("bad,keys", [
    ({"0.weight": torch.zeros(1)}, ['size mismatch for 0.weight', 'Missing key(s) in '
                                    'state_dict: "0.bias"']),
    ("extra", ['Unexpected key(s) in state_dict: "extra.weight"']),
])
def test_14_a_state_dict_that_does_not_fit_is_named_key_by_key_in_one_line(comm, bad, keys):
    model = cnn(seed=comm.rank)
    sync = psgd.torch.create("bsp", model, comm=comm)
    before = flat(model.parameters())
    if bad == "extra":
        bad = dict(cnn(seed=5).state_dict(), **{"extra.weight": torch.zeros(2)})
    with pytest.raises(psgd.UsageError) as caught:
        sync.load_state_dict(bad if comm.rank == 0 else None)
    text = str(caught.value)
    assert text.startswith("rank 0: load_state_dict: Error(s) in loading state_dict for "
                           "Sequential: "), text
    assert "\n" not in text and all(key in text for key in keys), text
    np.testing.assert_array_equal(flat(model.parameters()), before)
    sync.close()


def test_bmuf_takes_compression(comm):
    """(syncgrad's buckets: tests/mpi/torch/test_torch_compression.py)"""
    with psgd.torch.create("bmuf", Pair("ab"), comm=comm, compression="1bit") as sync:
        sync.synchronize(1)
        assert "residual_worker" in sync.algorithm.state_dict()


@pytest.mark.parametrize("name, servers, alone, message", [
    ("easgd", None, True, "easgd needs a server and at least one worker"),
    ("asgd", "2", False, r"servers must be an integer >= 1, got '2'"),
    ("masgd", 2.5, False, r"servers must be an integer >= 1, got 2.5")])
def test_no_workers_to_choose_defaults_for_is_psgd_creates_one_line(comm, name, servers, alone,
                                                                     message):
    """psgd.torch picks its options by the number of workers; where there is
    none (one process) or the servers are no count, psgd.create's error
    comes on every rank, not a ZeroDivisionError or a TypeError."""
    on = comm.Split(comm.rank) if alone else comm
    extra = {} if servers is None else {"servers": servers}
    with pytest.raises(psgd.UsageError, match=message):
        psgd.torch.create(name, Pair("ab"), comm=on, **extra)
    if alone:
        on.Free()
