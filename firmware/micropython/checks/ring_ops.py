"""Random ring operations on the MicroPython ring, for a comparison with hm_ring (C).

micropython ring_ops.py <seed> <sequences> <ops>: prints JSON, a list of
[command, args, answer] in the request language of tests/native/t_core.c (bytes as
"x<hex>"): ring_init, ring_capture, ring_gate, ring_pin + ring_release_pack, and
after every operation ring_counters, ring_list and ring_lru, each with the answer the
MicroPython ring gives. tests/test_micropython_session.py sends the same requests to
build/host/t_core and compares every answer.
"""

import json
import sys

from hirmem_mp.ring import BLOCKS, REFUSED_FULL, Ring

DEVICE_ID = bytes.fromhex("0102030405060708")
ZERO = bytes(32)
FLAGS = (0x0FFF, 0x07FF, 0x0BFF, 0x0F73, 0x0FBF)


class Lcg:
    def __init__(self, seed: int) -> None:
        self.s = seed & 0xFFFFFFFF

    def next(self, n: int) -> int:
        self.s = (self.s * 1103515245 + 12345) & 0x7FFFFFFF
        return (self.s >> 8) % n


def x(b) -> str:
    return "x" + bytes(b).hex()


def snapshot(ring, out) -> None:
    pinned = 0
    arena = 0
    live = []
    for k in range(ring.capacity):
        s = ring.slots[k]
        if s.seq:
            live += [k, s.seq, s.state, s.pin]
            if s.pin:
                pinned += 1
            arena += s.nblocks * ring.bs
    out.append(["ring_counters", [], [ring.captures, ring.evictions, ring.refusals,
                                      ring.quarantines, ring.candidates, ring.used,
                                      len(ring.lru), pinned, arena]])
    out.append(["ring_list", [], live])
    out.append(["ring_lru", [], list(ring.lru)])


def sequence(rng, boot: int, nops: int, out) -> None:
    capacity = (1, 2, 3, 4, 5, 8, 16)[rng.next(7)]
    arena = (320, 400, 512, 700, 2048)[rng.next(5)]
    ring = Ring(DEVICE_ID, boot, capacity, arena)
    out.append(["ring_init", [capacity, arena, x(DEVICE_ID), boot], ["ok"]])
    for _ in range(nops):
        kind = rng.next(10)
        if kind < 6:  # capture: sizes from empty to the largest record
            big = rng.next(4) == 0
            plen = rng.next(257) if big else rng.next(40)
            slen = rng.next(65) if big else rng.next(6)
            payload = bytes([rng.next(256)]) * plen
            source = b"s" * slen
            i = ring.capture(payload, source, 1, ZERO)
            if i >= 0:
                ans = ["ok", i, x(ring.record_id(i))]
            else:
                ans = ["refused_full" if -i == REFUSED_FULL else "refused_invalid"]
            out.append(["ring_capture", [x(payload), x(source), 1, x(ZERO)], ans])
        elif kind < 9:  # gate a VOLATILE record (leaves the LRU for good)
            if not ring.lru:
                continue
            i = ring.lru[rng.next(len(ring.lru))]
            flags = FLAGS[rng.next(len(FLAGS))]
            g = ring.gate(i, flags, 0x10000, 0xE666, 0x8000, True)
            out.append(["ring_gate", [i, flags, 0x10000, 0xE666, 0x8000],
                        ["ok"] + list(g.to_tuple())])
        else:  # a pack of the oldest packable record acknowledged: released
            p = ring.packable()
            if not p:
                continue
            i = p[0]
            ring.slots[i].pin = 7
            out.append(["ring_pin", [i, 7], ["ok"]])
            out.append(["ring_release_pack", [7], [ring.release_pack(7)]])
        snapshot(ring, out)


def main() -> None:
    seed, nseq, nops = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    rng = Lcg(seed)
    out = []
    for k in range(nseq):
        sequence(rng, k + 1, nops, out)
    assert BLOCKS == 32
    print(json.dumps(out))


main()
