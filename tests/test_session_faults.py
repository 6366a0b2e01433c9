"""Seeded random faults on the line between hirmem.link.session and the C device agent.

Each example loses, damages and repeats frames in both directions with a seeded
generator, then heals the line. Whatever happened, every record the device stored
reaches the intake exactly once and in order, every request ends exactly once, and
every damaged frame shows in the receiver's counters.
"""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import DEVICE_ID, HOST_ID
from hirmem.link.session import (
    CaptureDone,
    KnowledgeDone,
    RequestFailed,
    SessionConfig,
    SessionOpened,
)
from hirmem.protocol.messages import PackStatus
from hirmem.protocol.records import Record, record_id
from session_peer import Agent, Bench, Fault
from test_session_native import knowledge_pack

CONTEXT = bytes(range(32))


def faults(rng: random.Random, loss: float, counts: dict[str, int]) -> Fault:
    def fault(frame: bytes) -> bytes:
        if frame == b"\x00":
            return frame
        roll = rng.random()
        if roll < loss:
            counts["lost"] += 1
            return b""
        if roll < loss * 1.3:
            counts["damaged"] += 1
            bad = bytearray(frame)
            at = rng.randrange(len(bad) - 1)  # never the delimiter
            mask = rng.randrange(1, 256)
            while bad[at] ^ mask == 0:  # no new 00: one damaged frame stays one
                mask = rng.randrange(1, 256)
            bad[at] ^= mask
            return bytes(bad)
        if roll < loss * 1.5:
            counts["repeated"] += 1
            return frame + frame
        return frame

    return fault


@settings(max_examples=40, deadline=None, derandomize=True, database=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    loss=st.sampled_from([0.05, 0.15, 0.3]),
    max_frame=st.sampled_from([128, 512]),
)
def test_random_faults_exactly_once(seed: int, loss: float, max_frame: int) -> None:
    agent = Agent()
    try:
        bench = Bench(agent, config=SessionConfig(HOST_ID, max_frame=max_frame, window=4))
        bench.start(offer_n=3, offer_t=1500, ring=16)  # the last records by time
        bench.run_until(lambda: bench.session.is_open, 100)
        rng = random.Random(seed)
        up = {"lost": 0, "damaged": 0, "repeated": 0}
        down = {"lost": 0, "damaged": 0, "repeated": 0}
        bench.d2h.fault = faults(rng, loss, up)
        bench.h2d.fault = faults(rng, loss, down)
        push = bench.session.push_knowledge(knowledge_pack(5).encoded)
        tokens = []
        for n in range(1, 10):
            tokens.append(
                bench.session.capture(f"s{n}", bytes([n]) * n, CONTEXT, 0x0FFF, 0xFFFF, 0xF000)
            )
            bench.flush()
            bench.run(300, step=5)
        bench.run(10_000, step=5)
        bench.d2h.fault = None
        bench.h2d.fault = None

        def settled() -> bool:
            st = agent.status()
            return st["ring_used"] == 0 and bench.session.is_open and not bench.session.in_flight

        bench.run_until(settled, 60_000, step=5)
        stored = agent.status()["captures"] - agent.status()["refusals"]
        # a new boot never happened, so every record of boot 7 is numbered 1..stored
        got = [r.id for p in bench.intake.accepted for r in p.items if isinstance(r, Record)]
        assert got == [record_id(DEVICE_ID, 7, n) for n in range(1, stored + 1)]
        assert len(bench.intake.answers) >= len(bench.intake.accepted)
        # each request ended exactly once: answered, or failed with its session
        ended = [e.token for e in bench.take(CaptureDone) if e.token is not None]
        ended += [e.token for e in bench.take(RequestFailed)]
        assert sorted(ended) == sorted(tokens)
        # damage shows in the counters of the side that received it
        assert bench.session.counters.frames_bad_total == up["damaged"]
        assert agent.status()["frames_bad"] == down["damaged"]
        assert bench.seen(SessionOpened) >= 1
        # the knowledge push was retried until the device answered, and answered once
        [done] = bench.take(KnowledgeDone)
        assert done.token == push and done.held_seq == 5
        assert done.status in (PackStatus.ACCEPTED, PackStatus.DUPLICATE)
        assert agent.status()["knowledge_seq"] == 5
    finally:
        agent.close()
