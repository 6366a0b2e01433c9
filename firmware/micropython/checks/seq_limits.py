"""The agent at the end of its numbers, in process with a virtual clock (unix port).

Prints JSON: for each case the frames the agent wrote (hex bodies are decoded and
checked by tests/test_micropython_session.py with the host codec) and its counters.
 - queue: next_seq forced to 2^32 - 2; a STATUS takes the last seq, the next answer
   ends the session (HELLO again), as hm_agent's queue_small.
 - offer: a pack offer that would need seq 2^32 - 1 ends the session before it is
   queued; after the next HELLO_ACK the records are re-packed with a new pack seq.
 - ring: the ring's record seq at 2^32 - 2: one more capture is stored (id ...ffffffff),
   the next is refused full (hm_ring's rule: ids never repeat).
"""

import json
import sys

from hirmem_mp import frames, msg
from hirmem_mp.agent import Agent, Config
from hirmem_mp.record import GENESIS

DEVICE_ID = bytes.fromhex("0102030405060708")
HOST_ID = bytes.fromhex("a1a2a3a4a5a6a7a8")
SEED = bytes(range(32))
CONTEXT = bytes(range(32, 64))
T0 = 1780000000000


class Bench:
    def __init__(self, max_frame: int = 512) -> None:
        self.t = 0
        self.out = []
        self.rx = frames.FrameRx(600, lambda body: self.out.append(bytes(body)))
        self.a = Agent(Config(DEVICE_ID, SEED, board="seq", boot=3, max_frame=max_frame),
                       self.rx.feed, clock=lambda: self.t)
        self.a.start()
        self.host_seq = 2

    def advance(self, ms: int) -> None:
        for _ in range(ms):
            self.t += 1
            self.a.poll()

    def send(self, t: int, fields) -> None:
        body = msg.encode(t, self.host_seq, self.a.next_seq - 1, fields)
        self.host_seq += 1
        self.a.input(frames.encode_frame(body))
        self.advance(30)

    def hello_ack(self, pack_seq: int = 0, pack_hash: bytes = GENESIS) -> None:
        body = msg.encode(msg.HELLO_ACK, 1, 1, (HOST_ID, self.a.cfg.max_frame, 65536, 4, T0,
                                                 pack_seq, pack_hash, bytes(16),
                                                 self.a.hello_hash[:16]))
        self.a.input(frames.encode_frame(body))
        self.host_seq = 2
        self.advance(30)

    def capture(self, n: int) -> None:
        self.send(msg.CAPTURE, ("s%d" % n, b"payload %d" % n * 2, CONTEXT, 0x0FFF, 0x10000,
                                0x10000, 0))

    def result(self) -> dict:
        a = self.a
        return {"frames": [f.hex() for f in self.out], "sessions": a.sessions,
                "sessions_lost": a.sessions_lost, "exhausted": a.exhausted,
                "next_seq": a.next_seq, "session": a.session}


def case_queue() -> dict:
    b = Bench()
    b.hello_ack()
    b.a.next_seq = 0xFFFFFFFE
    b.send(msg.STATUS_REQUEST, ())  # STATUS takes seq 2^32 - 2, the last one
    b.send(msg.STATUS_REQUEST, ())  # its answer would need 2^32 - 1: new session
    return b.result()


def case_offer() -> dict:
    b = Bench(max_frame=128)
    b.hello_ack()
    for n in range(3):
        b.capture(n)
    b.a.next_seq = 0xFFFFFFFF  # the offer would need seq 2^32 - 1, never used
    r1 = b.a.offer_pack()
    lost = b.a.sessions_lost
    b.out.clear()
    b.hello_ack()  # head 0: the pack built for the failed offer is abandoned
    r2 = b.a.offer_pack()
    res = b.result()
    res.update({"first": r1, "lost_after_first": lost, "second": r2})
    return res


def case_ring() -> dict:
    b = Bench()
    b.hello_ack()
    b.a.ring.seq = 0xFFFFFFFE
    b.a.ring.captures = 0
    b.capture(1)
    b.capture(2)
    res = b.result()
    res["ring"] = [b.a.ring.captures, b.a.ring.refusals, b.a.ring.used]
    return res


print(json.dumps({"queue": case_queue(), "offer": case_offer(), "ring": case_ring()}))
sys.exit(0)
