"""Board entry point: run the agent on machine.UART with hirmem_config (mp_deploy.py)."""

import hirmem_config as c  # written by tools/mp_deploy.py

from hirmem_mp.agent import Agent, Config
from hirmem_mp.board import UartLink, run

link = UartLink(c.UART_ID, c.BAUDRATE)
agent = Agent(Config(c.DEVICE_ID, c.SEED, c.HOST_PUBLIC, c.HOST_ID, board=c.BOARD,
                     boot=c.BOOT, offer_threshold=c.OFFER_THRESHOLD,
                     offer_period_ms=c.OFFER_PERIOD_MS), link.write)
run(agent, link)
