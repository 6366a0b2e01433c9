"""One device line: the host's side of a session with one device.

Holds: ``transport`` (one interface for serial ports, ``socket://``, ``rfc2217://`` and
ptys), ``session`` (SPEC §5 to §8 as a sans-IO state machine: handshake, go-back-N,
frame pieces, packs offered and answered) and ``line`` (a session driven over a transport
with a real clock: :class:`~hirmem.link.line.Link`).

May import: :mod:`hirmem.protocol`.

Where a module could sit elsewhere: the pack sink that writes accepted packs to the
store (``StoreIntake``) is the daemon's (``hirmem.daemon.intake``); a session only
knows the :class:`~hirmem.link.session.Intake` interface it calls.
"""
