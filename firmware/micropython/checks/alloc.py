"""Heap allocation on the hot paths, measured with gc.mem_alloc (prints JSON)."""

import gc
import json

from hirmem_mp import frames, gate

frames_seen = []
rx = frames.FrameRx(512, lambda body: frames_seen.append(len(body)))
wire = frames.encode_frame(bytes(range(1, 200)))
body_bytes = wire[:-1]  # a frame without its delimiter: bytes collected one by one
res = gate.Result()


def measure(fn) -> int:
    gc.collect()
    gc.disable()
    a = gc.mem_alloc()
    fn()
    b = gc.mem_alloc()
    gc.enable()
    return b - a


def rx_bytes() -> None:
    for _ in range(5):
        rx.feed(body_bytes)
        rx.reset()


def rx_frames() -> None:
    for _ in range(20):
        rx.feed(wire)


def gate_eval() -> None:
    for f in range(0, 4096, 7):
        gate.evaluate_into(res, f, 0xE666, 0xB333)


print(json.dumps({
    "rx_bytes": 5 * len(body_bytes),
    "rx_bytes_alloc": measure(rx_bytes),
    "frames": 20,
    "frames_alloc": measure(rx_frames),
    "gate_evals": len(range(0, 4096, 7)),
    "gate_alloc": measure(gate_eval),
    "frames_ok": len(frames_seen),
}))
