"""What boots boards and injures lines, for tests, benchmarks and the demo.

Holds: ``qemu`` (boards in QEMU with their UART on a local socket, QMP resets),
``faultproxy`` (seeded, counted faults between a board and the host), ``rogue`` (a
scripted hostile device), ``provision`` (device keys and the key slot of a built
board image) and ``postgres`` (real PostgreSQL servers: primaries, synchronous
standbys, kills and promotions).

May import: :mod:`hirmem.protocol` and :mod:`hirmem.link`.

Where a module could sit elsewhere: ``provision`` patches firmware images, which is a
build-and-flash step rather than a daemon's job, so it lives beside the emulator that
boots those images; the key-file format it writes is :mod:`hirmem.protocol.keys`'s, so
the daemon reads keys without importing it.
"""
