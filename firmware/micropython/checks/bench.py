"""Figures of the MicroPython agent on this port (prints JSON); tools/bench_micropython.py."""

import gc
import json
import time

from hirmem_mp import ed25519, frames, gate
from hirmem_mp.packer import Packer
from hirmem_mp.ring import Ring


def per_s(n: int, us: int) -> float:
    return n * 1e6 / max(us, 1)


def main() -> None:
    out = {}
    res = gate.Result()
    n = 20000
    t = time.ticks_us()
    for k in range(n):
        gate.evaluate_into(res, k & 0x0FFF, 0xE666, 0xB333)
    out["gate_per_s"] = per_s(n, time.ticks_diff(time.ticks_us(), t))

    body = bytes((i * 7 + 1) & 0xFF for i in range(256))
    wire = bytearray(frames.wire_bound(260) + 1)
    crc = bytearray(260)
    n = 2000
    t = time.ticks_us()
    for _ in range(n):
        k = frames.encode_frame_into(body, 256, wire, crc)
    out["encode_per_s"] = per_s(n, time.ticks_diff(time.ticks_us(), t))
    got = [0]

    def sink(b) -> None:
        got[0] += 1

    rx = frames.FrameRx(512, sink)
    mv = memoryview(wire)[0:k]
    t = time.ticks_us()
    for _ in range(n):
        rx.feed(mv)
    out["decode_per_s"] = per_s(n, time.ticks_diff(time.ticks_us(), t))
    assert got[0] == n

    seed = bytes(range(32))
    msg = bytes(256)
    t = time.ticks_us()
    ed25519._base_table()
    out["ed25519_table_ms"] = time.ticks_diff(time.ticks_us(), t) / 1000
    reps = 10
    t = time.ticks_us()
    for _ in range(reps):
        sig = ed25519.sign(seed, msg)
    out["sign_ms"] = time.ticks_diff(time.ticks_us(), t) / 1000 / reps
    pub = ed25519.public_key(seed)
    t = time.ticks_us()
    for _ in range(reps):
        ok = ed25519.verify(sig, pub, msg)
    out["verify_ms"] = time.ticks_diff(time.ticks_us(), t) / 1000 / reps
    assert ok

    ring = Ring(b"\x01" * 8, 7)
    ctx = bytes(32)
    for k in range(6):
        i = ring.capture(b'{"t":%d}' % k, b"temp0", 1780000000000, ctx)
        ring.gate(i, 0x0FFF, 0x10000, 0xE666, 0x8000, True)
    packer = Packer(b"\x01" * 8, 7, seed, b"\x02" * 8)
    gc.collect()
    free0 = gc.mem_free()
    alloc0 = gc.mem_alloc()
    gc.disable()
    peak = 0
    built = packer.build(ring, 1780000000000, 1536)
    peak = gc.mem_alloc() - alloc0
    gc.enable()
    assert built is not None
    out["pack_bytes"] = len(built[0])
    out["pack_heap_peak_bytes"] = peak
    out["heap_free_before"] = free0
    print(json.dumps(out))


main()
