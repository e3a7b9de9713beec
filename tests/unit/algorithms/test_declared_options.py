"""Every option an algorithm takes is declared in its class (`alpha: float`
beside OPTIONS), so a reader finds self.alpha where the class is written."""
import pytest

import psgd
from psgd.algorithms import REGISTRY


@pytest.mark.parametrize("name", psgd.ALGORITHMS)
def test_every_option_is_declared_on_both_roles(name):
    cls = REGISTRY[name]
    for role in {cls, cls.for_rank(0)}:
        assert set(role.OPTIONS) <= role.declared_options(), role.__name__
