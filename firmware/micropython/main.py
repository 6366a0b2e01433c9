"""Board entry point: run the agent on machine.UART with hirmem_config (mp_deploy.py).

The boot counter and the knowledge head (seq and hash of the last accepted knowledge
pack) are kept in hirmem.state on the board's filesystem (hirmem_mp.persist: one line
with a CRC, replaced atomically by a rename): each boot takes a counter above every
earlier one, saved before use, so record ids never repeat after a reset or a power
cut; the agent's knowledge_saved hook saves each head before the KNOWLEDGE_RESULT
leaves, so a reset cannot roll the device's knowledge back.
"""

import hirmem_config as c  # written by tools/mp_deploy.py

from hirmem_mp.agent import Agent, Config
from hirmem_mp.board import UartLink, run
from hirmem_mp.persist import Persist

state = Persist()
state.adopt_legacy_head()  # knowledge.head of an older main.py: never a rollback
boot = state.start_boot(c.BOOT)
link = UartLink(c.UART_ID, c.BAUDRATE)
agent = Agent(Config(c.DEVICE_ID, c.SEED, c.HOST_PUBLIC, c.HOST_ID, board=c.BOARD,
                     boot=boot, offer_threshold=c.OFFER_THRESHOLD,
                     offer_period_ms=c.OFFER_PERIOD_MS, knowledge_seq=state.knowledge_seq,
                     knowledge_hash=state.knowledge_hash), link.write,
              knowledge_saved=state.save_knowledge)
run(agent, link)
