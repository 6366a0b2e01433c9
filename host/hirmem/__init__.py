"""hirmem: the host side of the hirmem edge-memory stack."""

from hirmem.errors import HirmemError

__all__ = ["HirmemError"]
__version__ = "0.1.0"
