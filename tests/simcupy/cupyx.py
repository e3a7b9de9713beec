"""cupyx of the simulated device: page-locked host arrays."""
from .device import empty_pinned  # noqa: F401
