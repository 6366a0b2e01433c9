"""The memory object: every field of the schema, plus the bookkeeping the engine needs.

Schema (``memory-layer-stack.txt``) → field here:

=============  ==================================================================
id             ``id`` — 32 lower-case hex digits (the 16-byte record id of §7.2)
payload        ``payload`` — the data, bytes
source         ``source`` — origin identifier (may be empty: lowers H)
timestamp      ``timestamp`` — capture time, ms since the Unix epoch
context        ``context`` — event-frame hash, 32 bytes
H, I, R        ``h``, ``i``, ``r`` — gate scores as reals in [0, 1]
F, C, Rn       ``f``, ``c``, ``rn`` — √(H·I), √(R·I), √(F·C)
confidence     ``confidence`` — Q of the write gate, [0, 1]
priority       ``priority`` — relevance weight (Rel of the strength equation)
links[]        ``links`` — related memory ids
access_count   ``access_count`` — rehearsals (recalls)
strength       ``strength`` — M, in [0, ∞)
hash           ``hash`` — SHA-256 over CBOR [id, payload, source, timestamp, context,
               prev_hash] (protocol §7.4: the payload and its provenance)
prev_hash      ``prev_hash`` — chain link (device chain, host chain or prior version)
audit_seq      ``audit_seq`` — seq of the latest audit record about this memory
state          ``state`` — lifecycle state (:class:`State`)
layer          ``layer`` — memory type (:class:`Layer`)
=============  ==================================================================

The fifth layer, integrity/provenance, is the audit chain itself (:mod:`.audit`): it
holds no memory objects, only append-only records about them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from hirmem.protocol.records import Layer, State, record_hash

__all__ = ["CONTENT_FIELDS", "Layer", "Memory", "State", "layer_for", "memory_text"]

CONTENT_FIELDS = ("id", "payload", "source", "timestamp", "context", "prev_hash")
"""Fields covered by :attr:`Memory.hash` (the rest is mutable engine state or scores)."""


def layer_for(state: State, kind: str, current: Layer, episode: bool = False) -> Layer:
    """The layer a memory lives in once it reaches ``state``.

    volatile → working; candidate → episodic; consolidated → semantic, or procedural
    for workflows/routines/repair paths (``kind == "procedure"``). An *episode*
    (a memory that observes one thing: :func:`hirmem.memory.observe.is_episode`) stays
    episodic when it consolidates: what becomes semantic is the pattern distilled from
    it (``kind == "pattern"``, semantic from its candidacy on). Quarantined and
    archived memories keep the layer they were in (quarantine and archive are states,
    not layers), except that a record leaving the working ring is at least episodic
    (protocol §7.1: a gated record, quarantined or not, is an episodic record).
    """
    if state is State.VOLATILE:
        return Layer.WORKING
    if kind == "pattern" and state in (State.CANDIDATE, State.CONSOLIDATED):
        return Layer.SEMANTIC
    if state is State.CANDIDATE:
        return Layer.EPISODIC
    if state is State.CONSOLIDATED:
        if kind == "procedure":
            return Layer.PROCEDURAL
        return Layer.EPISODIC if episode else Layer.SEMANTIC
    return Layer.EPISODIC if current is Layer.WORKING else current


def memory_text(payload: bytes, subject: str, attribute: str, value: str) -> str:
    """The text an embedder sees: the payload (UTF-8, lenient) and structured parts."""
    body = payload.decode("utf-8", errors="replace")
    if subject and attribute and value:  # (a reading, a fact: all three; no generator)
        return f"{body} {subject} {attribute} {value}".strip()
    extra = " ".join([p for p in (subject, attribute, value) if p])
    return f"{body} {extra}".strip() if extra else body


@dataclass(frozen=True, slots=True)
class Memory:
    """One memory. Immutable: the engine writes a changed copy (``dataclasses.replace``)."""

    id: str
    payload: bytes
    source: str
    timestamp: int
    context: bytes
    flags: int = 0
    h: float = 0.0
    i: float = 0.0
    r: float = 0.0
    f: float = 0.0
    c: float = 0.0
    rn: float = 0.0
    confidence: float = 1.0
    provenance: float = 1.0
    priority: float = 0.5
    w: float = 0.0
    verdict: int = -1  # gate verdict (0 GREEN, 1 YELLOW, 2 RED); -1 before the gate
    hard: int = 0  # gate hard-fail bits (hirmem.protocol.gate.Hard)
    trust: float = 0.0  # H·I·R at admission
    links: tuple[str, ...] = ()
    access_count: int = 0
    access_seen: int = 0  # access_count already folded into strength (U = count - seen)
    strength: float = 0.0
    last_access: float = 0.0  # host seconds; decay runs from here
    decayed_at: float = 0.0  # host seconds up to which decay has been applied
    hash: bytes = b""
    prev_hash: bytes = bytes(32)
    audit_seq: int = 0
    state: State = State.VOLATILE
    layer: Layer = Layer.WORKING
    # Structured content for the contradiction detector (optional).
    subject: str = ""
    attribute: str = ""
    value: str = ""
    negated: bool = False
    kind: str = "fact"  # see hirmem.memory.observe.KINDS (procedure → procedural layer)
    # Provenance.
    device: str = ""  # device id (hex) for records from packs; "" for host captures
    kid: str = ""  # signer key id (hex) of the pack
    device_scores: tuple[int, ...] = ()  # the device's Q16.16 (h,i,r,f,c,rn,w) as received
    gate_mode: str = ""  # "fixed" or "float"
    # Versions, flags, quarantine.
    version: int = 1
    supersedes: str = ""  # id of the prior version this one repairs
    flagged: bool = False  # involved in a contradiction
    quarantine_reason: str = ""
    permanent: bool = False  # R == 0: permanent quarantine (MEM-INV-2)
    created: float = 0.0  # host seconds at capture
    embedding: bytes = field(default=b"", repr=False)  # float32 vector, L2-normalised

    def content_hash(self) -> bytes:
        """Recompute the hash from the content fields (protocol §7.4)."""
        return record_hash(
            bytes.fromhex(self.id),
            self.payload,
            self.source,
            self.timestamp,
            self.context,
            self.prev_hash,
        )

    def text(self) -> str:
        """The text an embedder sees: the payload (UTF-8, lenient) and structured parts."""
        return memory_text(self.payload, self.subject, self.attribute, self.value)

    def replace(self, **changes: object) -> Memory:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]
