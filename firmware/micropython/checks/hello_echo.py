"""HELLO_ACK's echo (SPEC 5.3, 6.5 device step 3), in process with a virtual clock.

The agent must take only the HELLO_ACK of the HELLO it sends now. Prints JSON with its
counters after a HELLO_ACK that echoes the previous boot's HELLO, one that echoes
nothing, and the right one (checked by tests/test_micropython_session.py).
"""

import json
import sys
from hashlib import sha256

from hirmem_mp import frames, msg
from hirmem_mp.agent import Agent, Config
from hirmem_mp.record import GENESIS

DEVICE_ID = bytes.fromhex("0102030405060708")
HOST_ID = bytes.fromhex("a1a2a3a4a5a6a7a8")
SEED = bytes(range(32))
T0 = 1780000000000

out = []
rx = frames.FrameRx(600, lambda body: out.append(bytes(body)))
previous = Agent(Config(DEVICE_ID, SEED, board="echo", boot=2), lambda b: None, clock=lambda: 0)
agent = Agent(Config(DEVICE_ID, SEED, board="echo", boot=3), rx.feed, clock=lambda: 0)
agent.start()


def hello_ack(echo: bytes) -> None:
    body = msg.encode(msg.HELLO_ACK, 1, 1, (HOST_ID, 512, 65536, 4, T0, 0, GENESIS, bytes(16),
                                            echo))
    agent.input(frames.encode_frame(body))


def counters() -> list:
    return [agent.session, agent.sessions, agent.stale_hello_acks, agent.ignored,
            agent.errors_sent]


result = {}
hello_ack(sha256(previous.hello).digest()[:16])  # the previous boot's HELLO
result["previous_boot"] = counters()
hello_ack(bytes(16))
result["foreign"] = counters()
hello_ack(sha256(agent.hello).digest()[:16])
result["current"] = counters()
print(json.dumps(result))
sys.exit(0)
