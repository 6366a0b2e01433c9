"""Run the agent on the unix port against a pty: micropython agent_unix.py <pty> <config.json>.

The config file holds hex strings device_id, seed, host_public, host_id and the
Config numbers; the agent runs until the line closes or `stop_after_ms` passes.
"""

import json
import sys
import time

from hirmem_mp.agent import Agent, Config
from hirmem_mp.board import PtyLink, run


def main() -> None:
    path, cfg_path = sys.argv[1], sys.argv[2]
    with open(cfg_path) as f:
        c = json.load(f)
    hexes = ("device_id", "seed", "host_public", "host_id")
    kw = {}
    for k in c:
        if k == "stop_after_ms":
            continue
        v = c[k]
        kw[k] = bytes.fromhex(v) if k in hexes and v is not None else v
    agent = Agent(Config(**kw), None)
    link = PtyLink(path)
    agent.write = link.write
    t0 = time.ticks_ms()
    stop = c.get("stop_after_ms", 60000)
    run(agent, link, until=lambda: time.ticks_diff(time.ticks_ms(), t0) > stop)


main()
