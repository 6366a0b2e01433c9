"""Working-memory ring (the rules of firmware/core/hm_ring.h, in MicroPython).

At most `capacity` records; payload and source bytes live in one preallocated arena
of 32 blocks (block = arena_size // 32 bytes), a record taking a run of consecutive
blocks (first fit). Rules:
 - a capture evicts only VOLATILE records, least recently accessed first, and stops
   as soon as a free slot and a run of free blocks exist;
 - if even evicting every VOLATILE record would not make room, it evicts nothing and
   refuses (REFUSED_FULL): backpressure, counted, nothing dropped silently;
 - CANDIDATE / QUARANTINED records leave only by release() after the host
   acknowledged a pack carrying them (pinned = carried by an unacknowledged pack).
"""

from micropython import const

from .gate import Result, evaluate_into, normalise

OK = const(0)
REFUSED_FULL = const(1)
REFUSED_INVALID = const(2)

VOLATILE = const(0)
CANDIDATE = const(1)
QUARANTINED = const(3)
BLOCKS = const(32)


class Slot:
    __slots__ = ("seq", "state", "layer", "pin", "block", "nblocks", "plen", "slen",
                 "timestamp", "context", "gate", "confidence", "provenance", "priority",
                 "hash", "prev_hash")

    def __init__(self) -> None:
        self.seq = 0
        self.state = VOLATILE
        self.layer = 0
        self.pin = 0
        self.block = 0
        self.nblocks = 0
        self.plen = 0
        self.slen = 0
        self.timestamp = 0
        self.context = bytearray(32)
        self.gate = Result()
        self.confidence = 0
        self.provenance = 0
        self.priority = 0
        self.hash = bytearray(32)
        self.prev_hash = bytearray(32)


class Ring:
    def __init__(self, device_id: bytes, boot: int, capacity: int = 16,
                 arena_size: int = 2048) -> None:
        self.device_id = device_id
        self.boot = boot
        self.capacity = capacity
        self.bs = arena_size // BLOCKS
        self.arena = bytearray(self.bs * BLOCKS)
        self.slots = [Slot() for _ in range(capacity)]
        self.free = list(range(capacity - 1, -1, -1))  # LIFO: slot 0 is taken first
        self.lru = []  # VOLATILE slot indices, most recently accessed first
        self.used_blocks = 0
        self.seq = 0
        self.captures = 0
        self.evictions = 0
        self.refusals = 0
        self.quarantines = 0
        self.candidates = 0
        self.used = 0

    def _vol_blocks(self) -> int:
        m = 0
        for i in self.lru:
            s = self.slots[i]
            m |= ((1 << s.nblocks) - 1) << s.block
        return m

    def _find_run(self, freemask: int, nb: int) -> int:
        if nb == 0:
            return 0
        run = (1 << nb) - 1
        for b in range(BLOCKS - nb + 1):
            if (freemask >> b) & run == run:
                return b
        return -1

    def _drop(self, i: int) -> None:
        s = self.slots[i]
        self.used_blocks &= ~(((1 << s.nblocks) - 1) << s.block)
        s.seq = 0
        s.pin = 0
        self.free.append(i)
        self.used -= 1

    def capture(self, payload, source, timestamp: int, context) -> int:
        """Store a VOLATILE record; the slot index, or -REFUSED_FULL / -REFUSED_INVALID."""
        self.captures += 1
        pl = len(payload)
        sl = len(source)
        if pl > 256 or sl > 64 or len(context) != 32:
            self.refusals += 1
            return -REFUSED_INVALID
        if self.seq >= 0xFFFFFFFF:  # ids would repeat: reboot with a new boot counter
            self.refusals += 1
            return -REFUSED_FULL
        nb = (pl + sl + self.bs - 1) // self.bs
        full = (1 << BLOCKS) - 1
        # feasibility with every VOLATILE record evicted (I4: refuse without evicting)
        if (not self.free and not self.lru) or self._find_run(
                full & ~(self.used_blocks & ~self._vol_blocks()), nb) < 0:
            self.refusals += 1
            return -REFUSED_FULL
        while not self.free or self._find_run(full & ~self.used_blocks, nb) < 0:
            victim = self.lru.pop()
            self._drop(victim)
            self.evictions += 1
        b = self._find_run(full & ~self.used_blocks, nb)
        i = self.free.pop()
        s = self.slots[i]
        self.seq += 1
        s.seq = self.seq
        s.state = VOLATILE
        s.layer = 0
        s.pin = 0
        s.block = b
        s.nblocks = nb
        s.plen = pl
        s.slen = sl
        s.timestamp = timestamp
        s.context[:] = context
        s.confidence = s.provenance = s.priority = 0
        off = b * self.bs
        self.arena[off : off + pl] = payload
        self.arena[off + pl : off + pl + sl] = source
        self.used_blocks |= ((1 << nb) - 1) << b
        self.lru.insert(0, i)
        self.used += 1
        return i

    def payload(self, i: int):
        s = self.slots[i]
        off = s.block * self.bs
        return memoryview(self.arena)[off : off + s.plen]

    def source(self, i: int):
        s = self.slots[i]
        off = s.block * self.bs + s.plen
        return memoryview(self.arena)[off : off + s.slen]

    def record_id(self, i: int) -> bytes:
        return self.device_id + self.boot.to_bytes(4, "big") + self.slots[i].seq.to_bytes(4, "big")

    def gate(self, i: int, flags: int, q: int, p: int, priority: int, source_ok: bool) -> Result:
        """Normalise (SPEC 9.3), gate (9.4), move to the disposition (counted)."""
        s = self.slots[i]
        flags = normalise(flags, s.plen, source_ok, s.slen, s.timestamp, 32)
        evaluate_into(s.gate, flags, q, p)
        s.confidence = q
        s.provenance = p
        s.priority = priority
        s.state = s.gate.state
        s.layer = 1
        self.lru.remove(i)
        if s.state == CANDIDATE:
            self.candidates += 1
        else:
            self.quarantines += 1
        return s.gate

    def packable(self) -> list:
        """Gated, unpinned records in capture order (slot indices)."""
        out = [i for i in range(self.capacity)
               if self.slots[i].seq and self.slots[i].state != VOLATILE and not self.slots[i].pin]
        out.sort(key=lambda i: self.slots[i].seq)
        return out

    def unpin_pack(self, tag: int) -> int:
        n = 0
        for s in self.slots:
            if s.seq and s.pin == tag:
                s.pin = 0
                n += 1
        return n

    def release_pack(self, tag: int) -> int:
        n = 0
        for i in range(self.capacity):
            s = self.slots[i]
            if s.seq and s.pin == tag:
                self._drop(i)
                n += 1
        return n

    def volatiles(self) -> int:
        return len(self.lru)
