"""Run the agent on the unix port against a pty: micropython agent_unix.py <pty> <config.json>.

<pty> is a path (a pty slave or a tty) or a file descriptor number inherited from the
parent (e.g. a pty master, so the host can open the slave path with pyserial). The
config file holds hex strings device_id, seed, host_public, host_id and the Config
numbers; the agent runs until `stop_after_ms` passes. With `knowledge_file`, the
knowledge head is persisted there (the board's knowledge_saved hook): read at start,
written (seq and hash hex, then renamed into place) whenever a knowledge pack is
accepted. With `state_file`, hirmem_mp.persist keeps the boot counter and the
knowledge head there, as main.py does on a board: the boot is one above the last
(at least the config's), saved before the agent starts. With `sensor_period_ms` (and
`sensor_count`, default unbounded) the board's own sensor captures a reading that
often (Agent.capture: CAPTURE_RESULT ref 0).
"""

import json
import os
import sys
import time

from hirmem_mp.agent import Agent, Config
from hirmem_mp.board import PtyLink, run
from hirmem_mp.persist import Persist

LOCAL = ("stop_after_ms", "knowledge_file", "state_file", "sensor_period_ms", "sensor_count")
SENSOR_CONTEXT = b"\x5a" * 32


def load_head(path):
    try:
        with open(path) as f:
            seq, h = f.read().split()
    except OSError:
        return 0, None
    return int(seq), bytes.fromhex(h)


def saver(path):
    def save(seq: int, h) -> None:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d %s\n" % (seq, bytes(h).hex()))
        os.rename(tmp, path)

    return save


def main() -> None:
    where, cfg_path = sys.argv[1], sys.argv[2]
    with open(cfg_path) as f:
        c = json.load(f)
    hexes = ("device_id", "seed", "host_public", "host_id", "knowledge_hash")
    kw = {}
    for k in c:
        if k in LOCAL:
            continue
        v = c[k]
        kw[k] = bytes.fromhex(v) if k in hexes and v is not None else v
    hook = None
    kf = c.get("knowledge_file")
    if kf:
        kw["knowledge_seq"], kw["knowledge_hash"] = load_head(kf)
        hook = saver(kf)
    sf = c.get("state_file")
    if sf:
        state = Persist(sf)
        kw["boot"] = state.start_boot(kw.get("boot", 1))
        kw["knowledge_seq"], kw["knowledge_hash"] = state.knowledge_seq, state.knowledge_hash
        hook = state.save_knowledge
    agent = Agent(Config(**kw), None, knowledge_saved=hook)
    link = PtyLink(int(where) if where.isdigit() else where)
    agent.write = link.write
    t0 = time.ticks_ms()
    stop = c.get("stop_after_ms", 60000)
    period = c.get("sensor_period_ms", 0)
    left = [c.get("sensor_count", -1), t0]  # readings still due, time of the last one

    def until() -> bool:
        now = time.ticks_ms()
        if period and left[0] and time.ticks_diff(now, left[1]) >= period:
            left[1] = now
            n = left[0]
            left[0] -= 1
            agent.capture(b"reading %d" % n, b"sensor", 0, SENSOR_CONTEXT, 0x0FFF, 0x10000,
                          0xE666, 0x8000)
        return time.ticks_diff(now, t0) > stop

    run(agent, link, until=until)


main()
