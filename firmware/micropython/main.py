"""Board entry point: run the agent on machine.UART with hirmem_config (mp_deploy.py).

The knowledge head (seq and hash of the last accepted knowledge pack) is kept in
knowledge.head on the board's filesystem: written by the agent's knowledge_saved hook
before the KNOWLEDGE_RESULT leaves, read back at boot, so a reset cannot roll the
device's knowledge back.
"""

import os

import hirmem_config as c  # written by tools/mp_deploy.py

from hirmem_mp.agent import Agent, Config
from hirmem_mp.board import UartLink, run

HEAD = "knowledge.head"


def load_head():
    try:
        with open(HEAD) as f:
            seq, h = f.read().split()
        return int(seq), bytes.fromhex(h)
    except (OSError, ValueError):
        return 0, None


def save_head(seq: int, h) -> None:
    with open(HEAD + ".tmp", "w") as f:
        f.write("%d %s\n" % (seq, bytes(h).hex()))
    os.rename(HEAD + ".tmp", HEAD)


kseq, khash = load_head()
link = UartLink(c.UART_ID, c.BAUDRATE)
agent = Agent(Config(c.DEVICE_ID, c.SEED, c.HOST_PUBLIC, c.HOST_ID, board=c.BOARD,
                     boot=c.BOOT, offer_threshold=c.OFFER_THRESHOLD,
                     offer_period_ms=c.OFFER_PERIOD_MS, knowledge_seq=kseq,
                     knowledge_hash=khash), link.write, knowledge_saved=save_head)
run(agent, link)
