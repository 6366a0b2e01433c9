"""hirmem: the host side of the hirmem edge-memory stack, grouped by the flow.

``protocol`` (the wire contract) ← ``link`` (one device line) ← ``daemon`` (many lines
into the store) ← ``memory`` and ``semantic`` (reading the store through
``hirmem.daemon.reader``); ``emulation`` boots boards and injures lines; ``cli`` is the
``hirmem`` command. Each package's docstring says what it may import, and
tests/test_layout.py keeps that true.
"""

from hirmem.protocol.errors import HirmemError

__all__ = ["HirmemError"]
__version__ = "0.1.0"
