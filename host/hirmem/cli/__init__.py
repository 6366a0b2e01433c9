"""The ``hirmem`` command: the entry point, the operator commands and the demos.

Holds: ``entry`` (the argument parser and ``main``), ``commands`` (daemon, device,
keys, push, status, intake), ``demo`` (three boards in QEMU, the daemon, memory and
semantics, checked) and ``wire_demo`` (the wire contract over a simulated line).
``python -m hirmem.cli`` runs the same ``main``.

May import: anything of hirmem.

Where a module could sit elsewhere: the ``memory`` and ``semantic`` command groups stay
in their packages (``hirmem.memory.cli``, ``hirmem.semantic.cli``), next to what they
drive; ``entry`` only wires them in.
"""
