"""The memory packer and the knowledge store (rules of firmware/core/hm_pack.h).

Packer: seq = max((boot << 32) | 1, last signed + 1, host head + 1), never reused;
pending packs form one chain from the host head; accepted/duplicate releases the
records of that pack and every earlier pending one; refused/deferred unpins its
records and abandons every later pending pack (they link to it); a HELLO_ACK head
releases pending packs at or below it and abandons the rest.
Knowledge: SPEC 8.4 for kind 2 with require_chain False against the held head; an
accepted pack replaces the held items (deferred/storage if they do not fit).
"""

from hashlib import sha256

from micropython import const

from . import pack
from .record import GENESIS, encode_into, record_hash

PENDING_MAX = const(4)
KNOWLEDGE_CAPACITY = const(8)
KNOWLEDGE_TEXT = const(32)


class Packer:
    def __init__(self, device_id: bytes, boot: int, seed: bytes, kid: bytes) -> None:
        self.device_id = device_id
        self.boot = boot
        self._seed = seed
        self.kid = kid
        self.last_seq = 0
        self.host_seq = 0
        self.host_hash = GENESIS
        self.pending = []  # [seq, hash, tag, records]
        self.next_tag = 1
        self.built = 0
        self.acked = 0
        self.refused = 0
        self.abandoned = 0
        self.last_reason = 0

    def next_seq(self) -> int:
        return max((self.boot << 32) | 1, self.last_seq + 1, self.host_seq + 1)

    def prev(self) -> bytes:
        return self.pending[-1][1] if self.pending else self.host_hash

    def set_head(self, ring, seq: int, phash: bytes) -> None:
        for p in self.pending:
            if p[0] <= seq:
                ring.release_pack(p[2])
            else:
                ring.unpin_pack(p[2])
                self.abandoned += 1
        self.pending = []
        self.host_seq = seq
        self.host_hash = bytes(phash)

    def build(self, ring, created: int, cap: int):
        """Sign the next pack of packable records (as many as fit cap bytes):
        (pack bytes, seq), or None if nothing is packable or fits."""
        if len(self.pending) >= PENDING_MAX:
            return None
        seq = self.next_seq()
        if seq > 0xFFFFFFFFFFFFFFFF:
            return None
        prev = self.prev()
        head = bytearray()
        pack.payload_head(head, 1, self.device_id, seq, prev, created, 0)
        base = len(head) - 1 + 83 + 3  # items head grows later; bstr head <= 3 bytes
        recs = bytearray()
        link = prev
        taken = []
        for i in ring.packable():
            s = ring.slots[i]
            src = bytes(ring.source(i))
            rid = ring.record_id(i)
            payload = ring.payload(i)
            rh = record_hash(rid, payload, src, s.timestamp, s.context, link)
            mark = len(recs)
            encode_into(recs, rid, payload, src, s.timestamp, s.context, s.gate, s.confidence,
                        s.provenance, s.priority, 1, rh, link)
            if base + 3 + len(recs) > cap:
                recs = recs[0:mark]
                break
            s.prev_hash[:] = link
            s.hash[:] = rh
            link = rh
            taken.append(i)
        if not taken:
            return None
        payload = bytearray()
        pack.payload_head(payload, 1, self.device_id, seq, prev, created, len(taken))
        payload.extend(recs)
        out = pack.sign_pack(self._seed, self.kid, payload)
        tag = self.next_tag
        self.next_tag = self.next_tag + 1 if self.next_tag < 0xFFFFFFFF else 1
        for i in taken:
            ring.slots[i].pin = tag
        self.last_seq = seq
        self.pending.append([seq, sha256(out).digest(), tag, len(taken)])
        self.built += 1
        return out, seq

    def result(self, ring, seq: int, status: int, reason: int) -> bool:
        idx = -1
        for k in range(len(self.pending)):
            if self.pending[k][0] == seq:
                idx = k
        if idx < 0:
            return False
        if status == pack.ACCEPTED or status == pack.DUPLICATE:
            for p in self.pending[0 : idx + 1]:
                ring.release_pack(p[2])
            self.host_seq = self.pending[idx][0]
            self.host_hash = self.pending[idx][1]
            self.pending = self.pending[idx + 1 :]
            self.acked += 1
        else:
            for p in self.pending[idx:]:
                ring.unpin_pack(p[2])
            self.abandoned += len(self.pending) - idx - 1
            self.pending = self.pending[0:idx]
            self.refused += 1
            self.last_reason = reason
        return True


class Knowledge:
    def __init__(self, host_key) -> None:
        self.keys = [host_key] if host_key is not None else []
        self.seq = 0
        self.hash = GENESIS
        self.items = []
        self.accepted = 0
        self.refused = 0
        self.last_reason = 0

    def set_head(self, seq: int, phash) -> None:
        """The persisted head (hm_knowledge_set_head): packs at or below seq are refused."""
        self.seq = seq
        self.hash = bytes(phash)

    def accept(self, data):
        """(status, reason, pack_id) for KNOWLEDGE_RESULT (SPEC 8.4, require_chain off)."""
        head = (self.seq, self.hash) if self.seq else None
        st, reason, pid, phash, pl = pack.verify(data, self.keys, head, pack.KIND_KNOWLEDGE,
                                                 False)
        if st == pack.ACCEPTED and pl is not None:
            items = pl[6]
            fits = len(items) <= KNOWLEDGE_CAPACITY
            for it in items:
                for k in (1, 2, 3):
                    if len(it[k].encode()) > KNOWLEDGE_TEXT:
                        fits = False
            if not fits:
                return pack.DEFERRED, pack.R_STORAGE, pid
            self.items = items
            self.seq = pl[3]
            self.hash = phash
            self.accepted += 1
        elif st == pack.REFUSED:
            self.refused += 1
            self.last_reason = reason
        return st, reason, pid

