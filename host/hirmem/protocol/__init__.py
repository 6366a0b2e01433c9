"""The contract as the host implements it: protocol/SPEC.md and protocol/hirmem.cddl.

Holds: ``cbor`` (deterministic CBOR), ``frames`` (COBS + CRC-32), ``messages``,
``pieces`` (frame pieces, §6.8), ``records``, ``gate`` and ``fixedpoint`` (the HIR
gate in Q16.16 and in floating point), ``packs`` (COSE_Sign1 memory and knowledge
packs), ``keys`` (Ed25519 keys, key ids and key files), ``identity`` (fold + FNV-1a)
and ``errors`` (the :class:`HirmemError` family that every package raises).

May import: nothing of hirmem outside this package. Every other package may import it.

Where a module could sit elsewhere: key files are read and written in ``keys``, not in
``hirmem.emulation.provision``, because the daemon reads the host's key file and must not
import the provisioning tool; ``errors`` is here because this package imports nothing else
and everything above it raises the same family.
"""
